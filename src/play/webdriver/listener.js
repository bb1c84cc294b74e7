// Installed in every page before its own scripts run (Chrome DevTools
// `Page.addScriptToEvaluateOnNewDocument`, once per reset with the cell's
// seed in `__gameplanSeed`), or late by the observation script where that
// is not available:
// - keeps the page's uncaught errors, unhandled promise rejections, failed
//   resource loads (with their full URL, so gameplan can tell an offline
//   outside host from the game's own file) and console.error calls in
//   `window.__gameplanErrors` until gameplan reads them;
// - seeds `Math.random` and `crypto.getRandomValues` with the cell's seed
//   (a page that draws its board at random replays);
// - notes every element given a click-like listener, so a `<div>` or an
//   `<a>` without `href` that a script made a control is offered.
(function () {
  if (window.__gameplanErrors) return;
  var errors = [];
  var MAX = 100;
  function keep(message) {
    if (errors.length < MAX) errors.push(String(message));
  }
  Object.defineProperty(window, '__gameplanErrors', { value: errors, enumerable: false });

  if (typeof window.__gameplanSeed === 'number') {
    // mulberry32: small, fast, and the same sequence in every browser.
    var state = (window.__gameplanSeed >>> 0) ^ 0x9e3779b9;
    var next = function () {
      state = (state + 0x6d2b79f5) >>> 0;
      var t = state;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    Math.random = next;
    if (window.crypto && window.crypto.getRandomValues) {
      var fill = function (array) {
        var bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
        for (var i = 0; i < bytes.length; i++) bytes[i] = Math.floor(next() * 256);
        return array;
      };
      try {
        Object.defineProperty(window.crypto, 'getRandomValues', { value: fill, configurable: true });
      } catch (e) {}
      if (window.crypto.randomUUID) {
        try {
          Object.defineProperty(window.crypto, 'randomUUID', {
            configurable: true,
            value: function () {
              var b = fill(new Uint8Array(16));
              b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
              var h = Array.prototype.map.call(b, function (x) { return (x + 0x100).toString(16).slice(1); }).join('');
              return h.slice(0, 8) + '-' + h.slice(8, 12) + '-' + h.slice(12, 16) + '-' + h.slice(16, 20) + '-' + h.slice(20);
            }
          });
        } catch (e) {}
      }
    }
  }

  var listened = new WeakSet();
  Object.defineProperty(window, '__gameplanListened', { value: listened, enumerable: false });
  // What a mouse click sets off (a touch-only listener is a swipe, not a control).
  var CLICKY = { click: 1, mousedown: 1, mouseup: 1, pointerdown: 1, pointerup: 1 };
  var add = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, listener, options) {
    if (CLICKY[type] && this instanceof Element) listened.add(this);
    return add.call(this, type, listener, options);
  };

  window.addEventListener('error', function (e) {
    if (!(e instanceof ErrorEvent)) {
      var target = e.target || {};
      var src = String(target.currentSrc || target.src || target.href || '');
      keep('Failed to load ' + String(target.tagName || 'resource').toLowerCase() + ' ' + src);
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
