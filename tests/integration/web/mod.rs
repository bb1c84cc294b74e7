//! Web games in headless Chromium over chromedriver: the example page,
//! published-like pages, scope, load failures, and nothing left behind.

mod browser;
mod hermetic;
mod real_pages;
mod rules;
mod seen;
mod video;
