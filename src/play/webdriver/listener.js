// Installed in every page before its own scripts run (Chrome DevTools
// `Page.addScriptToEvaluateOnNewDocument`, once per reset with the cell's
// seed in `__gameplanSeed`, followed by `clock.js`), or late by the
// observation script where that is not available:
// - saves the browser's own timers in `window.__gameplanReal` before
//   `clock.js` replaces them: gameplan's own waiting (`page.js`) runs on
//   real time while the page's runs on the virtual clock;
// - keeps the page's uncaught errors, unhandled promise rejections and
//   console.error calls in `window.__gameplanErrors` until gameplan reads
//   them;
// - counts the page's requests in flight (fetch, XHR, reading a fetched
//   body, an IndexedDB open or transaction) in `window.__gameplanPending`, so a page is read once what an
//   action asked for has arrived, and keeps every request that failed or
//   answered HTTP >= 400 (fetch, XHR, a script, image, style or any
//   resource the browser timed) in `window.__gameplanFailed`, with its
//   full URL: gameplan tells the game's own broken file from an outside
//   host that is offline;
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

  // Bound now: `clock.js` replaces the page's copies next.
  var real = {
    setTimeout: window.setTimeout.bind(window),
    clearTimeout: window.clearTimeout.bind(window),
    requestAnimationFrame: window.requestAnimationFrame.bind(window),
    now: performance.now.bind(performance)
  };
  Object.defineProperty(window, '__gameplanReal', { value: real, enumerable: false });

  var failed = [];
  Object.defineProperty(window, '__gameplanFailed', { value: failed, enumerable: false });
  function fail(method, url, status, kind) {
    if (failed.length < MAX) failed.push({ method: method, url: url, status: status, kind: kind });
  }
  function absolute(url) {
    try { return new URL(String(url), location.href).href; } catch (e) { return String(url); }
  }
  // What is in flight: an id per request, its method and URL as the report
  // names it if it never finishes.
  var inFlight = new Map();
  var flightId = 0;
  function start(what) {
    var id = ++flightId;
    inFlight.set(id, what);
    return function () { inFlight.delete(id); };
  }
  Object.defineProperty(window, '__gameplanPending', {
    enumerable: false,
    value: function () {
      var out = [];
      inFlight.forEach(function (what) { out.push(what); });
      var images = document.images || [];
      for (var i = 0; i < images.length; i++) {
        if (!images[i].complete && images[i].currentSrc) out.push('image ' + images[i].currentSrc);
      }
      if (document.fonts && document.fonts.status === 'loading') out.push('web fonts');
      // Media asked to play whose length is not known yet (`clock.js`).
      var media = document.querySelectorAll('audio,video');
      for (var j = 0; j < media.length; j++) {
        if (media[j].__gameplanWaiting) out.push('media ' + media[j].currentSrc);
      }
      return out;
    }
  });

  var realFetch = window.fetch;
  if (realFetch) {
    window.fetch = function (input, init) {
      var method = String((init && init.method) || (input && input.method) || 'GET').toUpperCase();
      var url = absolute(input && typeof input === 'object' && 'url' in input ? input.url : input);
      var done = start(method + ' ' + url);
      var answer;
      try {
        answer = realFetch.apply(window, arguments);
      } catch (e) {
        done();
        throw e;
      }
      return answer.then(function (response) {
        done();
        if (response.status >= 400) fail(method, url, response.status, 'fetch');
        return response;
      }, function (e) {
        done();
        if (!(e && e.name === 'AbortError')) fail(method, url, 0, 'fetch');
        throw e;
      });
    };
  }
  // A fetched body arrives after its response: `fetch(u).then(r => r.json())`
  // is in flight until the JSON is read.
  if (window.Response) {
    ['json', 'text', 'arrayBuffer', 'blob', 'formData'].forEach(function (name) {
      var read = Response.prototype[name];
      if (!read) return;
      Response.prototype[name] = function () {
        var done = start('GET ' + this.url + ' (its body)');
        var body;
        try {
          body = read.apply(this, arguments);
        } catch (e) {
          done();
          throw e;
        }
        return body.then(function (v) { done(); return v; }, function (e) { done(); throw e; });
      };
    });
  }
  var XHR = window.XMLHttpRequest;
  if (XHR) {
    var open = XHR.prototype.open, send = XHR.prototype.send;
    var listen = EventTarget.prototype.addEventListener;
    // Answers in the order asked. A page that sends requests at once and
    // keeps the answers as they come (`texts[i++] = xhr.response`) reads
    // otherwise on each run as the network races; so an asynchronous
    // XHR's closing events (readyState 4, load, error, timeout, abort,
    // loadend) reach the page's handlers only once every XHR sent before
    // it has closed, in the order they were sent (at most HOLD_MS of real
    // time: a request that never ends does not hold the others for good).
    var HOLD_MS = 2000;
    var CLOSING = { load: 1, error: 1, timeout: 1, abort: 1, loadend: 1, readystatechange: 1 };
    var turn = { next: 1, sent: 0, closed: {}, held: {} };
    function flush() {
      for (;;) {
        var queue = turn.held[turn.next];
        delete turn.held[turn.next];
        (queue || []).forEach(function (call) { call(); });
        if (!turn.closed[turn.next] || turn.next > turn.sent) return;
        delete turn.closed[turn.next];
        turn.next++;
      }
    }
    function deliver(xhr, call) {
      var seq = xhr.__gameplanSeq;
      if (!seq || seq <= turn.next) {
        call();
        return;
      }
      (turn.held[seq] = turn.held[seq] || []).push(call);
      real.setTimeout(function () {
        if (!turn.held[seq]) return;
        // The requests before it never ended: let them go by.
        while (turn.next < seq) {
          delete turn.closed[turn.next];
          turn.next++;
        }
        flush();
      }, HOLD_MS);
    }
    function ordered(type, fn) {
      return function (e) {
        var xhr = this;
        if (type === 'readystatechange' && xhr.readyState !== 4) return fn.call(xhr, e);
        deliver(xhr, function () {
          if (typeof fn === 'function') fn.call(xhr, e);
          else if (fn && typeof fn.handleEvent === 'function') fn.handleEvent(e);
        });
      };
    }
    var wrapped = new WeakMap();
    XHR.prototype.addEventListener = function (type, fn, options) {
      if (!CLOSING[type] || !fn) return listen.call(this, type, fn, options);
      var by = wrapped.get(fn) || {};
      by[type] = by[type] || ordered(type, fn);
      wrapped.set(fn, by);
      return listen.call(this, type, by[type], options);
    };
    XHR.prototype.removeEventListener = function (type, fn, options) {
      var by = fn && wrapped.get(fn);
      var remove = EventTarget.prototype.removeEventListener;
      return remove.call(this, type, by && by[type] ? by[type] : fn, options);
    };
    Object.keys(CLOSING).forEach(function (type) {
      try {
        Object.defineProperty(XHR.prototype, 'on' + type, {
          configurable: true,
          get: function () { return (this.__gameplanOn || {})[type] || null; },
          set: function (fn) {
            var on = this.__gameplanOn;
            if (!on) {
              on = {};
              Object.defineProperty(this, '__gameplanOn', { value: on, enumerable: false });
            }
            if (!(type in on)) {
              listen.call(this, type, ordered(type, function (e) {
                var handler = on[type];
                if (typeof handler === 'function') handler.call(this, e);
              }));
            }
            on[type] = typeof fn === 'function' ? fn : null;
          }
        });
      } catch (e) {}
    });
    XHR.prototype.open = function (method, url, async) {
      this.__gameplanRequest = { method: String(method).toUpperCase(), url: absolute(url) };
      this.__gameplanSync = arguments.length > 2 && !async;
      return open.apply(this, arguments);
    };
    XHR.prototype.send = function () {
      var xhr = this;
      var what = xhr.__gameplanRequest || { method: 'GET', url: '' };
      var done = start(what.method + ' ' + what.url);
      if (!xhr.__gameplanSync) {
        var seq = ++turn.sent;
        xhr.__gameplanSeq = seq;
        listen.call(xhr, 'loadend', function () {
          turn.closed[seq] = true;
          if (seq === turn.next) flush();
        });
      }
      // A `file://` page's XHR answers status 0 when it succeeds: only the
      // `error` event says it failed.
      listen.call(xhr, 'error', function () { fail(what.method, what.url, 0, 'xhr'); });
      listen.call(xhr, 'timeout', function () { fail(what.method, what.url, 0, 'xhr'); });
      listen.call(xhr, 'loadend', function () {
        done();
        if (xhr.status >= 400) fail(what.method, what.url, xhr.status, 'xhr');
      });
      try {
        return send.apply(xhr, arguments);
      } catch (e) {
        done();
        throw e;
      }
    };
  }
  // A saved game read back from IndexedDB (localforage, idb) arrives like
  // a response: a page read before it came shows its loading screen ("Day
  // 0 of undefined"), and on a busy machine a replay reads otherwise.
  // Opening a database is in flight until it opens, fails or is blocked; a
  // transaction until it completes or aborts (a request's `error` bubbles
  // to it first, and a page may handle it and go on).
  if (window.IDBFactory && window.IDBDatabase) {
    var idbListen = EventTarget.prototype.addEventListener;
    var until = function (target, events, done) {
      events.forEach(function (type) { idbListen.call(target, type, done); });
    };
    ['open', 'deleteDatabase'].forEach(function (name) {
      var call = IDBFactory.prototype[name];
      if (!call) return;
      IDBFactory.prototype[name] = function (db) {
        var request = call.apply(this, arguments);
        until(request, ['success', 'error', 'blocked'], start('IndexedDB ' + name + ' ' + db));
        return request;
      };
    });
    var transaction = IDBDatabase.prototype.transaction;
    IDBDatabase.prototype.transaction = function (stores) {
      var tx = transaction.apply(this, arguments);
      until(tx, ['complete', 'abort'], start('IndexedDB transaction on ' + String(stores)));
      return tx;
    };
  }
  // A resource that answered >= 400 without an element to fire `error` at
  // (a CSS background, a font) is still timed by the browser.
  if (window.PerformanceObserver) {
    try {
      new PerformanceObserver(function (list) {
        list.getEntries().forEach(function (entry) {
          // fetch and XHR are counted where they are made.
          if (entry.initiatorType === 'fetch' || entry.initiatorType === 'xmlhttprequest') return;
          // The browser asks for /favicon.ico by itself; the page did not.
          if (entry.initiatorType === 'other' && /\/favicon\.ico$/.test(entry.name)) return;
          if (entry.responseStatus >= 400) fail('GET', entry.name, entry.responseStatus, entry.initiatorType);
        });
      }).observe({ type: 'resource', buffered: true });
    } catch (e) {}
  }

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
      if (src) fail('GET', absolute(src), 0, String(target.tagName || 'resource').toLowerCase());
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
