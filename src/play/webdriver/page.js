// What gameplan reads from and finds in a page (run with WebDriver's
// Execute Async Script; `listener.js` comes first). arguments[0] is the
// request: {mode: "observe" | "find" | "input", label, maxText}.
var request = arguments[0];
var done = arguments[arguments.length - 1];

function visible(el) {
  var r = el.getBoundingClientRect();
  if (r.width <= 0 || r.height <= 0) return false;
  var s = getComputedStyle(el);
  return s.visibility !== 'hidden' && s.display !== 'none' && parseFloat(s.opacity || '1') > 0;
}

function labelOf(el) {
  var text = el.getAttribute('aria-label') || el.innerText || el.value ||
    el.getAttribute('title') || el.getAttribute('alt') || el.getAttribute('placeholder') ||
    el.id || el.getAttribute('name') || el.tagName.toLowerCase();
  return String(text).replace(/\s+/g, ' ').trim().slice(0, 60);
}

var CLICKABLE = 'a[href],button,input:not([type=hidden]):not([type=text]):not([type=search])' +
  ':not([type=email]):not([type=password]):not([type=number]),select,summary,[onclick],' +
  '[role=button],[role=link],[role=checkbox],[role=tab],[role=menuitem]';

// Every visible, enabled clickable element with a label unique on the
// page: a second "OK" is "OK #2", in document order.
function clickables() {
  var count = {};
  var out = [];
  var all = document.querySelectorAll(CLICKABLE);
  for (var i = 0; i < all.length; i++) {
    var el = all[i];
    if (el.disabled || !visible(el)) continue;
    var label = labelOf(el);
    count[label] = (count[label] || 0) + 1;
    if (count[label] > 1) label = label + ' #' + count[label];
    out.push({ el: el, label: label });
  }
  return out;
}

var TEXT_INPUT = 'textarea,input[type=text],input[type=search],input[type=email],' +
  'input[type=password],input[type=number],input:not([type]),[contenteditable=true]';

// Where `type:` types: the focused text field, else the first visible one.
function textInput() {
  var active = document.activeElement;
  if (active && active.matches && active.matches(TEXT_INPUT)) return active;
  var all = document.querySelectorAll(TEXT_INPUT);
  for (var i = 0; i < all.length; i++) {
    if (!all[i].disabled && visible(all[i])) return all[i];
  }
  return null;
}

// After the next animation frame (and at most 200 ms: a hidden page gets
// none), and the task after it, what the last action started is in the
// page: a game's own frame callbacks, asked for while the action ran, come
// first in that frame, and what they put off to a timer comes before ours.
// (One frame, not two: the screenshot draws the page afresh anyway.)
function settled(then) {
  var fired = false;
  function go() { if (!fired) { fired = true; then(); } }
  requestAnimationFrame(function () { setTimeout(go, 0); });
  setTimeout(go, 200);
}

if (request.mode === 'find') {
  var found = clickables().filter(function (c) { return c.label === request.label; })[0];
  done(found ? found.el : null);
} else if (request.mode === 'input') {
  done(textInput());
} else {
  settled(function () {
    var hooks = window.gameplan || {};
    var seen = clickables();
    var body = document.body ? document.body.innerText : '';
    var path = location.pathname.split('/').pop();
    done({
      title: document.title,
      page: path + location.search + location.hash,
      text: body.slice(0, request.maxText + 1),
      elements: seen.map(function (c) {
        var r = c.el.getBoundingClientRect();
        return { label: c.label, x: Math.round(r.left), y: Math.round(r.top),
          w: Math.round(r.width), h: Math.round(r.height) };
      }),
      input: textInput() !== null,
      keys: Array.isArray(hooks.keys) ? hooks.keys.map(String) : null,
      done: hooks.done === true,
      // Each element's W3C reference, for a click without a lookup.
      refs: seen.map(function (c) { return c.el; }),
      score: Number(hooks.score) || 0,
      errors: window.__gameplanErrors ? window.__gameplanErrors.splice(0) : []
    });
  });
}
