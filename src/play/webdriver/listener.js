// Installed in every page before its own scripts run (Chrome DevTools
// `Page.addScriptToEvaluateOnNewDocument`), or late by the observation
// script where that is not available: keeps the page's uncaught errors,
// unhandled promise rejections, failed resource loads and console.error
// calls in `window.__gameplanErrors` until gameplan reads them.
(function () {
  if (window.__gameplanErrors) return;
  var errors = [];
  var MAX = 100;
  function keep(message) {
    if (errors.length < MAX) errors.push(String(message));
  }
  Object.defineProperty(window, '__gameplanErrors', { value: errors, enumerable: false });
  window.addEventListener('error', function (e) {
    if (!(e instanceof ErrorEvent)) {
      var target = e.target || {};
      var src = String(target.src || target.href || '');
      keep('Failed to load ' + String(target.tagName || 'resource').toLowerCase() + ' ' + src.split('/').pop());
      return;
    }
    var where = e.filename ? ' (' + String(e.filename).split('/').pop() + ':' + e.lineno + ')' : '';
    keep('Uncaught ' + (e.error ? String(e.error) : e.message) + where);
  }, true);
  window.addEventListener('unhandledrejection', function (e) {
    keep('Unhandled promise rejection: ' + String(e.reason));
  });
  var original = console.error;
  console.error = function () {
    var parts = [];
    for (var i = 0; i < arguments.length; i++) parts.push(String(arguments[i]));
    keep('console.error: ' + parts.join(' '));
    return original.apply(console, arguments);
  };
})();
