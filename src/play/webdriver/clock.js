// The page's virtual clock, installed right after `listener.js` (which
// saved the real timers for gameplan's own use) and before the page's own
// scripts, with the start time derived from the cell's seed in
// `__gameplanClockStart` (milliseconds since the epoch). Like Playwright's
// clock or sinon's fake timers: `Date` (`new Date()`, `Date.now`),
// `performance.now`, `setTimeout`/`setInterval` and their `clear*`,
// `requestAnimationFrame` (60 Hz frames) and `requestIdleCallback` all read
// or wait on virtual time, which moves only when gameplan advances it
// (`window.__gameplanClock.advance`, from `page.js`, between an action and
// the read of the page). So the same seed and actions see the same dates,
// prices and timer-driven states, however fast the machine is.
//
// Due callbacks run in time order (ties in the order they were asked for),
// each in a task of its own (the page's promises settle between two), and
// a callback's exception goes to `window.reportError`, so the listener
// catches it as an uncaught error. A callback that never returns holds the
// advance, and gameplan's script timeout makes it a `hang`.
(function () {
  if (window.__gameplanClock || typeof window.__gameplanClockStart !== 'number') return;
  var RealDate = Date;
  var real = window.__gameplanReal;
  var start = window.__gameplanClockStart;
  // Milliseconds since the start: small numbers, so frame boundaries add
  // up exactly (at 1.7e12 a double has no room for a 60th of a second).
  var now = 0;
  var FRAME = 1000 / 60;
  // id -> {id, at, every, fn, args, frame, nesting}
  var timers = new Map();
  var nextId = 1;
  // The nesting of the callback running now: browsers clamp a timer asked
  // for from 5 levels of timers deep to 4 ms, so a `setTimeout(f, 0)` chain
  // moves time on instead of spinning at one instant.
  var nesting = 0;

  function report(e) {
    if (window.reportError) {
      window.reportError(e);
    } else if (real) {
      real.setTimeout(function () { throw e; }, 0);
    }
  }

  function add(fn, delay, args, every) {
    var wait = Math.max(0, Number(delay) || 0);
    if (nesting >= 5 && wait < 4) wait = 4;
    var id = nextId++;
    timers.set(id, {
      id: id,
      at: now + wait,
      every: every ? Math.max(wait, 1) : null,
      fn: fn,
      args: args,
      frame: false,
      nesting: nesting + 1
    });
    return id;
  }
  function cancel(id) {
    timers.delete(Number(id));
  }

  window.setTimeout = function (fn, delay) {
    return add(fn, delay, Array.prototype.slice.call(arguments, 2), false);
  };
  window.setInterval = function (fn, delay) {
    return add(fn, delay, Array.prototype.slice.call(arguments, 2), true);
  };
  window.clearTimeout = cancel;
  window.clearInterval = cancel;
  window.requestAnimationFrame = function (fn) {
    // The next frame boundary after now (frames are counted from the start).
    var frame = Math.floor(now / FRAME + 1e-3) + 1;
    var id = nextId++;
    timers.set(id, { id: id, at: frame * FRAME, every: null, fn: fn, args: null, frame: true, nesting: 0 });
    return id;
  };
  window.cancelAnimationFrame = cancel;
  window.requestIdleCallback = function (fn) {
    var idle = { didTimeout: false, timeRemaining: function () { return 50; } };
    return add(fn, 1, [idle], false);
  };
  window.cancelIdleCallback = cancel;

  // Sound and video on the virtual clock. Nobody hears a headless page,
  // and a game that waits for its intro tune to end must start at the same
  // step on every replay: `play()` plays nothing out loud, `currentTime`
  // moves with the virtual clock, and `ended` comes once the media's
  // duration has passed on it (a `loop` starts over). Until the media's
  // length is known (its metadata loads in real time) the read of the page
  // waits for it, as for a request in flight (`listener.js`).
  var Media = window.HTMLMediaElement;
  if (Media) {
    var proto = Media.prototype;
    var realPause = proto.pause;
    var media = new WeakMap();
    var of = function (el) {
      var m = media.get(el);
      if (!m) {
        m = { playing: false, from: 0, offset: 0, ended: false, timer: null };
        media.set(el, m);
      }
      return m;
    };
    var position = function (el) {
      var m = of(el);
      var at = m.offset + (m.playing ? (now - m.from) / 1000 : 0);
      return isFinite(el.duration) ? Math.min(at, el.duration) : at;
    };
    var fire = function (el, type) {
      add(function () { el.dispatchEvent(new Event(type)); }, 0, [], false);
    };
    var schedule = function (el) {
      var m = of(el);
      if (m.timer) {
        cancel(m.timer);
        m.timer = null;
      }
      if (!m.playing) return;
      if (!isFinite(el.duration)) {
        if (!el.error) {
          // Its length is not known yet (its source may not even be
          // chosen yet: a cached one is chosen after this script): the
          // read waits for its metadata, when it has a source to load.
          el.__gameplanWaiting = Boolean(el.src || el.currentSrc || el.querySelector('source'));
          el.addEventListener('loadedmetadata', function () {
            el.__gameplanWaiting = false;
            schedule(el);
          }, { once: true });
          el.addEventListener('error', function () { el.__gameplanWaiting = false; }, { once: true });
        }
        return;
      }
      m.timer = add(function () {
        m.timer = null;
        if (el.loop) {
          m.offset = 0;
          m.from = now;
          schedule(el);
          return;
        }
        m.offset = el.duration;
        m.playing = false;
        m.ended = true;
        el.dispatchEvent(new Event('pause'));
        el.dispatchEvent(new Event('ended'));
      }, Math.max(0, el.duration - position(el)) * 1000, [], false);
    };
    proto.play = function () {
      var m = of(this);
      realPause.call(this);
      if (m.ended) {
        m.ended = false;
        m.offset = 0;
      }
      if (!m.playing) {
        m.playing = true;
        m.from = now;
        fire(this, 'play');
        fire(this, 'playing');
        schedule(this);
      }
      return Promise.resolve();
    };
    proto.pause = function () {
      var m = of(this);
      realPause.call(this);
      if (!m.playing) return;
      m.offset = position(this);
      m.playing = false;
      schedule(this);
      fire(this, 'pause');
    };
    try {
      Object.defineProperty(proto, 'currentTime', {
        configurable: true,
        get: function () { return position(this); },
        set: function (value) {
          var m = of(this);
          m.offset = Math.max(0, Number(value) || 0);
          m.from = now;
          m.ended = false;
          schedule(this);
        }
      });
      Object.defineProperty(proto, 'paused', {
        configurable: true,
        get: function () { return !of(this).playing; }
      });
      Object.defineProperty(proto, 'ended', {
        configurable: true,
        get: function () { return of(this).ended; }
      });
    } catch (e) {}
    // An `autoplay` element starts by itself, on real time: it plays on
    // the virtual clock instead.
    document.addEventListener('play', function (e) {
      if (e.isTrusted && e.target instanceof Media) e.target.play();
    }, true);
  }

  function ClockDate() {
    if (!new.target) return new RealDate(start + Math.floor(now)).toString();
    var args = arguments.length === 0 ? [start + Math.floor(now)] : Array.prototype.slice.call(arguments);
    return Reflect.construct(RealDate, args, new.target);
  }
  ClockDate.prototype = RealDate.prototype;
  ClockDate.now = function () { return start + Math.floor(now); };
  ClockDate.parse = RealDate.parse;
  ClockDate.UTC = RealDate.UTC;
  window.Date = ClockDate;
  try {
    Object.defineProperty(performance, 'now', {
      configurable: true,
      value: function () { return now; }
    });
  } catch (e) {}

  function next(limit) {
    var best = null;
    timers.forEach(function (t) {
      if (t.at <= limit && (!best || t.at < best.at || (t.at === best.at && t.id < best.id))) best = t;
    });
    return best;
  }

  function run(t) {
    now = Math.max(now, t.at);
    if (t.every === null) {
      timers.delete(t.id);
    } else {
      t.at += t.every;
    }
    var outer = nesting;
    nesting = t.nesting;
    try {
      if (typeof t.fn === 'function') {
        t.fn.apply(window, t.frame ? [now] : t.args);
      } else {
        // A string timer is code, as the browser's own would run it.
        (0, eval)(String(t.fn));
      }
    } catch (e) {
      report(e);
    } finally {
      nesting = outer;
    }
  }

  // A task of its own for each callback: a message to a channel of our
  // own, not a real timer (those are clamped to 4 ms when nested).
  var channel = new MessageChannel();
  var queued = [];
  channel.port1.onmessage = function () {
    var then = queued.shift();
    if (then) then();
  };
  function later(then) {
    queued.push(then);
    channel.port2.postMessage(0);
  }

  Object.defineProperty(window, '__gameplanClock', {
    enumerable: false,
    value: {
      now: function () { return start + now; },
      // Moves time `ms` on, running what falls due on the way; `between`
      // (optional) is called with a continuation after each callback (the
      // page's requests are waited for there); `done` when time is there.
      advance: function (ms, between, done) {
        var target = now + Math.max(0, Number(ms) || 0);
        function step() {
          var t = next(target);
          if (!t) {
            now = target;
            done();
            return;
          }
          run(t);
          later(function () { if (between) between(step); else step(); });
        }
        step();
      }
    }
  });
})();
