// What gameplan reads from and finds in a page (run with WebDriver's
// Execute Async Script; `listener.js` comes first). arguments[0] is the
// request: {mode: "observe" | "find" | "input" | "advance", label, maxText,
// scope, advanceMs (virtual time to move on first), requestsMs (real time
// the page's requests are waited for, at most)}; "find" takes an offered
// action in `label`. `window.__gameplanProbe`, when set before this
// script, is `game.probe` as a function.
// `scope` = {prefixes: [...], patterns: [regex source, ...]}: the URLs that
// are the game (its origin or directory, plus `game.allow`).
var request = arguments[0];
var done = arguments[arguments.length - 1];
var scope = request.scope || { prefixes: [], patterns: [] };

function inScope(url) {
  if (!url) return true;
  if (/^(javascript:|about:blank|blob:|data:)/.test(url)) return true;
  if (scope.prefixes.length === 0 && scope.patterns.length === 0) return true;
  for (var i = 0; i < scope.prefixes.length; i++) {
    if (url === scope.prefixes[i].replace(/\/$/, '') || url.indexOf(scope.prefixes[i]) === 0) return true;
  }
  for (var j = 0; j < scope.patterns.length; j++) {
    if (new RegExp(scope.patterns[j]).test(url)) return true;
  }
  return false;
}

function visible(el) {
  var r = el.getBoundingClientRect();
  if (r.width <= 0 || r.height <= 0) return false;
  var s = getComputedStyle(el);
  return s.visibility !== 'hidden' && s.display !== 'none' && parseFloat(s.opacity || '1') > 0;
}

// Whether another element covers `el` at its centre (a dialog, a loading
// overlay): a person could not click it, so it is not offered. An element
// outside the window cannot be told; WebDriver scrolls it in to click.
function covered(el) {
  var r = el.getBoundingClientRect();
  var x = r.left + r.width / 2, y = r.top + r.height / 2;
  if (x < 0 || y < 0 || x >= window.innerWidth || y >= window.innerHeight) return false;
  var top = document.elementFromPoint(x, y);
  if (!top) return false;
  return !(top === el || el.contains(top) || top.contains(el) && top.tagName === 'LABEL');
}

function labelOf(el) {
  var text = el.getAttribute('aria-label') || el.innerText || el.value ||
    el.getAttribute('title') || el.getAttribute('alt') || el.getAttribute('placeholder') ||
    el.id || el.getAttribute('name') || el.tagName.toLowerCase();
  return String(text).replace(/\s+/g, ' ').trim().slice(0, 60);
}

// Form fields are offered as fields (`select:`, `type:`, `set:`), not
// clicks: WebDriver refuses a click on most of them (a file, color or date
// input) and a click on a select or a text field changes nothing.
var CLICKABLE = 'a[href],button,input,summary,[onclick],' +
  '[role=button],[role=link],[role=checkbox],[role=tab],[role=menuitem],[role=option],' +
  '[role=switch],[role=radio],[tabindex]:not([tabindex="-1"])';
var CLICK_INPUTS = { button: 1, submit: 1, reset: 1, checkbox: 1, radio: 1, image: 1 };
function isField(el) {
  var tag = el.tagName;
  if (tag === 'SELECT' || tag === 'TEXTAREA' || tag === 'OPTION' || el.isContentEditable) return true;
  return tag === 'INPUT' && !CLICK_INPUTS[(el.type || 'text').toLowerCase()];
}

// Where a link or a form's submit leads, when it leads away from the page.
function leadsTo(el) {
  if (el.tagName === 'A' && el.hasAttribute('href')) {
    var href = el.getAttribute('href');
    if (href.charAt(0) === '#') return null;
    return el.href;
  }
  var form = el.form || (el.closest && el.closest('form'));
  var submits = el.tagName === 'BUTTON' ? (el.type || 'submit') === 'submit' :
    el.tagName === 'INPUT' && (el.type === 'submit' || el.type === 'image');
  if (form && submits && form.getAttribute('action')) return form.action;
  return null;
}

function pointerControl(el) {
  if (getComputedStyle(el).cursor !== 'pointer') return false;
  var parent = el.parentElement;
  // One control, one action: the outermost element with the pointer.
  return !(parent && getComputedStyle(parent).cursor === 'pointer');
}

// Every visible, enabled, uncovered control a person could click, in the
// game's scope, with a label unique on the page: a second "OK" is "OK #2",
// in document order.
function clickables() {
  var count = {};
  var out = [];
  var seen = new Set();
  var listened = window.__gameplanListened;
  var all = document.querySelectorAll('body *');
  for (var i = 0; i < all.length && out.length < 400; i++) {
    var el = all[i];
    var candidate = el.matches(CLICKABLE) || (listened && listened.has(el)) ||
      (el.children.length < 8 && pointerControl(el));
    if (!candidate || seen.has(el) || isField(el)) continue;
    // A control inside another offered control is the same control.
    var inner = false;
    for (var p = el.parentElement; p; p = p.parentElement) {
      if (seen.has(p)) { inner = true; break; }
    }
    if (inner) continue;
    if (el.disabled || !visible(el) || covered(el)) continue;
    var target = leadsTo(el);
    if (target && !inScope(target)) continue;
    seen.add(el);
    var label = labelOf(el);
    count[label] = (count[label] || 0) + 1;
    if (count[label] > 1) label = label + ' #' + count[label];
    out.push({ el: el, label: label });
  }
  return out;
}

function roleOf(el) {
  return el.getAttribute('role') || el.tagName.toLowerCase();
}

// The states of a control that are game state (not its box): what the
// observation's hash covers besides labels and roles.
function statesOf(el) {
  var states = [];
  if (el.checked) states.push('checked');
  if (el.selected || el.getAttribute('aria-selected') === 'true') states.push('selected');
  if (el.getAttribute('aria-pressed') === 'true') states.push('pressed');
  if (el.getAttribute('aria-expanded') === 'true') states.push('expanded');
  if (el.open) states.push('open');
  if (el.value !== undefined && el.tagName === 'SELECT') states.push('value=' + el.value);
  return states;
}

var TEXT_INPUT = 'textarea,input[type=text],input[type=search],input[type=email],' +
  'input[type=password],input[type=number],input[type=tel],input[type=url],input:not([type]),' +
  '[contenteditable=true],[contenteditable=""]';

// Where a bare `type:TEXT` types: the focused text field, else the first
// visible, enabled one.
function textInput() {
  var active = document.activeElement;
  if (active && active.matches && active.matches(TEXT_INPUT) && usable(active)) return active;
  var all = document.querySelectorAll(TEXT_INPUT);
  for (var i = 0; i < all.length; i++) {
    if (usable(all[i])) return all[i];
  }
  return null;
}

// A field a person could fill in: shown, enabled, writable, not covered.
function usable(el) {
  return !el.disabled && !el.readOnly && visible(el) && !covered(el);
}

function clean(text) {
  return String(text).replace(/\s+/g, ' ').trim().slice(0, 60);
}

// A <label>'s own words, without the fields inside it (a <select> in its
// label would lend it every option's text).
function ownText(label) {
  var copy = label.cloneNode(true);
  var inner = copy.querySelectorAll('select,textarea,input,button,datalist');
  for (var i = 0; i < inner.length; i++) inner[i].remove();
  return copy.textContent;
}

// A field's name as a person reads it: its aria-label, its <label>, its
// placeholder, title, name or id.
function fieldLabel(el) {
  var label = el.labels && el.labels.length ? ownText(el.labels[0]) : '';
  return clean(el.getAttribute('aria-label') || label || el.getAttribute('placeholder') ||
    el.getAttribute('title') || el.getAttribute('name') || el.id ||
    (el.tagName === 'SELECT' ? 'select' : el.type || el.tagName.toLowerCase())) || 'field';
}

// What `type:` offers per kind of field: a value its type accepts.
var TYPE_VALUES = {
  text: 'hello', search: 'hello', password: 'hello', email: 'player@example.com',
  tel: '5550100', url: 'https://example.com/'
};

function numberIn(el) {
  var min = parseFloat(el.min), max = parseFloat(el.max), step = parseFloat(el.step);
  if (!(step > 0)) step = 1;
  var low = isFinite(min) ? min : (isFinite(max) ? Math.min(0, max) : 0);
  var high = isFinite(max) ? max : low + 10 * step;
  var value = low + Math.floor((high - low) / 2 / step) * step;
  return String(+value.toFixed(6));
}

// The values `set:` offers for the inputs WebDriver cannot click or type
// into: set by script, with the `input` and `change` events a person's
// choice fires.
function settable(el) {
  var min = el.getAttribute('min'), max = el.getAttribute('max');
  switch ((el.type || '').toLowerCase()) {
    case 'range': return [min || '0', max || '100'];
    case 'color': return ['#ff0000', '#0000ff'];
    case 'date': return [min || '2024-01-15'];
    case 'datetime-local': return [min || '2024-01-15T12:00'];
    case 'month': return [min || '2024-01'];
    case 'week': return [min || '2024-W03'];
    case 'time': return [min || '12:00'];
    default: return [];
  }
}

// Every field a person could fill in, with what gameplan offers for it
// (each offer an action and the element it acts on): a <select> once per
// option, a text field once with a value its type accepts, a range, date
// or color input by `set:`. A file input is offered nothing.
function fields() {
  var out = [];
  var count = {};
  var all = document.querySelectorAll('select,textarea,input,[contenteditable]');
  for (var i = 0; i < all.length && out.length < 40; i++) {
    var el = all[i];
    if (!isField(el) || el.tagName === 'OPTION' || !usable(el)) continue;
    var type = el.tagName === 'INPUT' ? (el.type || 'text').toLowerCase() : '';
    if (type === 'file' || type === 'hidden') continue;
    var label = fieldLabel(el);
    count[label] = (count[label] || 0) + 1;
    if (count[label] > 1) label = label + ' #' + count[label];
    var offers = [];
    var role = el.getAttribute('role') || (type ? 'input:' + type : el.tagName.toLowerCase());
    var value = el.isContentEditable && el.tagName !== 'INPUT' && el.tagName !== 'TEXTAREA' ?
      el.innerText : String(el.value);
    if (el.tagName === 'SELECT') {
      var options = el.options;
      var names = {};
      for (var o = 0; o < options.length && offers.length < 30; o++) {
        var option = options[o];
        if (option.disabled || (option.parentElement && option.parentElement.disabled)) continue;
        var name = clean(option.label || option.text) || option.value;
        names[name] = (names[name] || 0) + 1;
        if (names[name] > 1) name = name + ' #' + names[name];
        offers.push({ action: 'select:' + label + '=' + name, el: option });
      }
    } else if (type === 'number') {
      offers.push({ action: 'type:' + label + '=' + numberIn(el), el: el });
    } else if (TYPE_VALUES[type] || el.tagName === 'TEXTAREA' || el.isContentEditable) {
      offers.push({ action: 'type:' + label + '=' + (TYPE_VALUES[type] || 'hello'), el: el });
    } else {
      var values = settable(el);
      for (var v = 0; v < values.length; v++) {
        offers.push({ action: 'set:' + label + '=' + values[v], el: el });
      }
    }
    if (offers.length === 0) continue;
    out.push({
      el: el, label: label, role: role,
      value: type === 'password' ? '*'.repeat(value.length) : value.slice(0, 60),
      offers: offers
    });
  }
  return out;
}

// The element an offered action acts on (`click:`, `select:`, `type:`,
// `set:` exactly as offered), else, for a `type:LABEL=TEXT` or
// `set:LABEL=VALUE` of a script, the field labelled LABEL.
function offered(action) {
  var clicks = clickables();
  for (var i = 0; i < clicks.length; i++) {
    if ('click:' + clicks[i].label === action) return clicks[i].el;
  }
  var all = fields();
  for (var f = 0; f < all.length; f++) {
    for (var o = 0; o < all[f].offers.length; o++) {
      if (all[f].offers[o].action === action) return all[f].offers[o].el;
    }
  }
  var named = /^(type|set):(.*?)=/.exec(action);
  if (named) {
    for (var n = 0; n < all.length; n++) {
      if (all[n].label === named[2]) return all[n].el;
    }
  }
  return null;
}

// Hides the text caret and the browser's focus ring: the caret blinks, and
// whether the ring shows depends on whether the window has the browser's
// focus (a tab opened and closed takes it away), not on the game. The
// screenshot the observation's visual signature is made of must show
// neither. A constructed sheet leaves the page's DOM as it is.
function calmScreen() {
  if (window.__gameplanCalm || !document.adoptedStyleSheets || typeof CSSStyleSheet !== 'function') return;
  try {
    var sheet = new CSSStyleSheet();
    sheet.replaceSync('*, *::before, *::after { caret-color: transparent !important; }\n' +
      '*:focus, *:focus-visible { outline: none !important; }');
    document.adoptedStyleSheets = document.adoptedStyleSheets.concat([sheet]);
    Object.defineProperty(window, '__gameplanCalm', { value: true, enumerable: false });
  } catch (e) {}
}

// `game.probe`, evaluated in the page: its value as JSON, or why not.
function probe() {
  if (typeof window.__gameplanProbe !== 'function') return null;
  try {
    var value = window.__gameplanProbe();
    if (value === undefined) return { error: 'it returned undefined' };
    var json = JSON.stringify(value);
    if (json === undefined) return { error: 'its value is not JSON (' + typeof value + ')' };
    return { value: JSON.parse(json) };
  } catch (e) {
    return { error: 'it threw ' + String(e) };
  }
}

// gameplan's own waiting runs on the browser's real timers (saved by
// `listener.js` before `clock.js` gave the page virtual ones).
var real = window.__gameplanReal || {
  setTimeout: window.setTimeout.bind(window),
  requestAnimationFrame: window.requestAnimationFrame.bind(window),
  now: performance.now.bind(performance)
};
function pendingNow() {
  return window.__gameplanPending ? window.__gameplanPending() : [];
}

// Until the page's requests in flight (fetch, XHR, a body being read, an
// image, web fonts) have finished, or the real time `until` has come: a
// page read while its data is on the way would read differently on replay.
function quiet(until, then) {
  function check() {
    if (pendingNow().length === 0 || real.now() >= until) {
      then();
      return;
    }
    real.setTimeout(check, 5);
  }
  check();
}

// The page's virtual clock moved `ms` on (no clock: nothing to move),
// waiting for its requests after each callback that ran, so what a timer
// fetched is in the page before time moves past it.
function advanced(ms, until, then) {
  var clock = window.__gameplanClock;
  if (!clock || !(ms > 0)) {
    then();
    return;
  }
  clock.advance(ms, function (step) { quiet(until, step); }, then);
}

// After the next animation frame (and at most 200 ms: a hidden page gets
// none), and the task after it, what the last action started is in the
// page; then, for at most SETTLE_MS, until no CSS animation or transition
// runs (a tile sliding, a dialog fading in), so the text, the controls and
// the screenshot are of the page at rest, and a replay reads the same.
var SETTLE_MS = 1000;
function settled(then) {
  var fired = false;
  var started = real.now();
  function running() {
    if (!document.getAnimations) return false;
    var all = document.getAnimations();
    for (var i = 0; i < all.length; i++) {
      var a = all[i];
      if (a.playState !== 'running') continue;
      // An endless animation (a spinner, a pulsing button) never settles.
      var timing = a.effect && a.effect.getComputedTiming ? a.effect.getComputedTiming() : {};
      if (timing.iterations === Infinity) continue;
      return true;
    }
    return false;
  }
  function check() {
    if (fired) return;
    if (running() && real.now() - started < SETTLE_MS) {
      real.setTimeout(check, 16);
      return;
    }
    fired = true;
    then();
  }
  function go() { real.setTimeout(check, 0); }
  var first = false;
  real.requestAnimationFrame(function () { if (!first) { first = true; go(); } });
  real.setTimeout(function () { if (!first) { first = true; go(); } }, 200);
}

// The requests that failed since the last read, each once: its status
// from the browser's resource timing where the failure did not say it (an
// element's `error` event), split into the game's own and the outside
// hosts' (offline CI: a badge, a CDN).
function failures() {
  var taken = window.__gameplanFailed ? window.__gameplanFailed.splice(0) : [];
  var seen = {};
  var own = [];
  var outside = [];
  taken.forEach(function (f) {
    var status = f.status;
    if (!status && performance.getEntriesByName) {
      var timed = performance.getEntriesByName(f.url);
      for (var i = timed.length - 1; i >= 0; i--) {
        if (timed[i].responseStatus) { status = timed[i].responseStatus; break; }
      }
    }
    var key = f.method + ' ' + f.url + ' ' + status;
    if (seen[key]) return;
    seen[key] = true;
    if (inScope(f.url)) {
      own.push({ method: f.method, url: f.url, status: status, kind: f.kind });
    } else {
      outside.push({ url: f.url, kind: f.kind });
    }
  });
  return { own: own, outside: outside };
}

if (request.mode === 'find') {
  done(offered(request.label));
} else if (request.mode === 'input') {
  done(textInput());
} else if (request.mode === 'advance') {
  // Time moving on with no read (a key held down between its press and
  // its release).
  var deadline = real.now() + (request.requestsMs || 2000);
  advanced(request.advanceMs || 0, deadline, function () { done(null); });
} else {
  calmScreen();
  var until = real.now() + (request.requestsMs || 2000);
  var read = function () {
    var hooks = window.gameplan || {};
    var seen = clickables().slice(0, request.maxElements || 60);
    var filled = fields();
    var body = document.body ? document.body.innerText : '';
    var path = location.pathname.split('/').pop();
    var nav = performance.getEntriesByType ? performance.getEntriesByType('navigation')[0] : null;
    var errors = window.__gameplanErrors ? window.__gameplanErrors.splice(0) : [];
    var failed = failures();
    done({
      title: document.title,
      page: path + location.search + location.hash,
      href: location.href,
      inScope: inScope(location.href),
      status: nav && nav.responseStatus ? nav.responseStatus : 0,
      text: body.slice(0, request.maxText + 1),
      elements: seen.map(function (c) {
        return { label: c.label, role: roleOf(c.el), states: statesOf(c.el) };
      }),
      fields: filled.map(function (f) {
        return {
          label: f.label, role: f.role, value: f.value,
          actions: f.offers.map(function (o) { return o.action; })
        };
      }),
      // The element each field's offer acts on, in the same order.
      fieldRefs: filled.map(function (f) { return f.offers.map(function (o) { return o.el; }); }),
      probe: probe(),
      keys: Array.isArray(hooks.keys) ? hooks.keys.map(String) : null,
      done: hooks.done === true,
      // Each element's W3C reference, for a click without a lookup.
      refs: seen.map(function (c) { return c.el; }),
      score: Number(hooks.score) || 0,
      errors: errors,
      failed: failed.own,
      offline: failed.outside.map(function (f) { return f.url; }),
      offlineScripts: failed.outside.filter(function (f) { return f.kind === 'script'; })
        .map(function (f) { return f.url; }),
      pending: pendingNow()
    });
  };
  // Requests the action started, then time moved on, then what that
  // started, then the page at rest.
  quiet(until, function () {
    advanced(request.advanceMs || 0, until, function () {
      quiet(until, function () { settled(read); });
    });
  });
}
