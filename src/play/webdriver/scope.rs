//! What a web game is, as URLs: the origin of its page (for an `http(s)`
//! page, also a served one) or the page's directory (a `file://` page),
//! plus the plan's `game.allow` patterns. Links and forms that lead out of
//! it are not offered, and a navigation out of it is undone (`page.js`
//! decides with what [`Scope::for_page`] gives it).

use serde_json::{Value, json};

/// The URLs that are the game.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// URL prefixes in scope: `http://127.0.0.1:8080/`, `file:///repo/web/`.
    prefixes: Vec<String>,
    /// `game.allow` globs as anchored regular expressions (JavaScript's
    /// and Rust's syntax agree on the subset used).
    patterns: Vec<String>,
    /// The same globs, matched here.
    allow: Vec<globset::GlobMatcher>,
}

impl PartialEq for Scope {
    fn eq(&self, other: &Scope) -> bool {
        self.prefixes == other.prefixes && self.patterns == other.patterns
    }
}

impl Eq for Scope {}

impl Scope {
    /// The scope of a game whose page is `url`, widened by `allow` globs
    /// (`*` matches within a path part, `**` across parts).
    pub fn of(url: &str, allow: &[String]) -> Scope {
        let prefixes = prefix_of(url).into_iter().collect();
        let patterns = allow.iter().map(|glob| glob_regex(glob)).collect();
        // `*` stays within a path part, as in the regular expressions.
        let allow = allow
            .iter()
            .filter_map(|glob| {
                globset::GlobBuilder::new(glob)
                    .literal_separator(true)
                    .build()
                    .ok()
            })
            .map(|g| g.compile_matcher())
            .collect();
        Scope {
            prefixes,
            patterns,
            allow,
        }
    }

    /// Whether `url` is the game (the same rule as `page.js`'s `inScope`).
    pub fn contains(&self, url: &str) -> bool {
        if self.prefixes.is_empty() && self.patterns.is_empty() {
            return true;
        }
        self.prefixes
            .iter()
            .any(|p| url.starts_with(p.as_str()) || url == p.trim_end_matches('/'))
            || self.allow.iter().any(|g| g.is_match(url))
    }

    /// The URL prefixes of the game's own origin or directory.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// The scope as `page.js` takes it.
    pub fn for_page(&self) -> Value {
        json!({ "prefixes": self.prefixes, "patterns": self.patterns })
    }
}

/// The origin of an `http(s)` URL with a slash (`http://host:port/`), or a
/// `file://` URL's directory; `None` for a page with no place (`about:`,
/// `data:`): everything is in scope then.
fn prefix_of(url: &str) -> Option<String> {
    if let Some((scheme, rest)) = url.split_once("://") {
        if scheme.eq_ignore_ascii_case("file") {
            let dir = &url[..=url.rfind('/')?];
            return Some(dir.to_owned());
        }
        if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") {
            let host = rest.split(['/', '?', '#']).next().unwrap_or(rest);
            return Some(format!("{}://{host}/", scheme.to_ascii_lowercase()));
        }
    }
    None
}

/// `https://cdn.example/**` as `^https://cdn\.example/.*$`.
fn glob_regex(glob: &str) -> String {
    let mut out = String::from("^");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                out.push_str(".*");
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            c if "\\.+()[]{}^$|".contains(c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push('$');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_s_scope_is_its_origin_or_its_directory() {
        assert_eq!(
            prefix_of("http://127.0.0.1:4000/games/index.html?x=1").as_deref(),
            Some("http://127.0.0.1:4000/")
        );
        assert_eq!(
            prefix_of("HTTPS://example.org").as_deref(),
            Some("https://example.org/")
        );
        assert_eq!(
            prefix_of("file:///repo/web/index.html").as_deref(),
            Some("file:///repo/web/")
        );
        assert_eq!(prefix_of("about:blank"), None);
    }

    #[test]
    fn allow_globs_match_within_and_across_path_parts() {
        assert_eq!(
            glob_regex("https://cdn.example/**"),
            r"^https://cdn\.example/.*$"
        );
        assert_eq!(
            glob_regex("https://*.example/a.js"),
            r"^https://[^/]*\.example/a\.js$"
        );
        let scope = Scope::of(
            "http://127.0.0.1:1/",
            &["https://cdn.example/**".to_owned()],
        );
        assert!(scope.contains("http://127.0.0.1:1/a/b.html"));
        assert!(scope.contains("https://cdn.example/lib/x.js"));
        assert!(!scope.contains("https://cdn.example.org/x.js"));
        assert!(!scope.contains("http://127.0.0.1:2/"));
        assert_eq!(
            scope.for_page(),
            json!({"prefixes": ["http://127.0.0.1:1/"], "patterns": [r"^https://cdn\.example/.*$"]})
        );
    }
}
