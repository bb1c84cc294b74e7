//! `game.serve`: a repo directory served over HTTP on a free loopback port
//! for one browser session, so a web game is played as it is deployed
//! (same origin rules, `fetch` and modules work, which `file://` breaks)
//! without a server the plan starts by hand.
//!
//! Owns: the file lookup (percent-decoded, never outside the directory, a
//! directory answers its `index.html`), content types by extension, single
//! byte ranges (`Range: bytes=...`, 206/416; media and WebAssembly loaders
//! ask for them), `HEAD`, and `Cache-Control: no-store` (each cell's
//! browser profile is fresh anyway, and a rebuilt file must not be served
//! stale). It does not decide what is in scope (the session does).

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The server of one session; stopped when dropped.
pub struct StaticServer {
    /// `http://127.0.0.1:PORT/`.
    pub base: String,
    task: tokio::task::JoinHandle<()>,
}

impl StaticServer {
    /// Serves `dir` (which must exist) on a free loopback port.
    pub async fn start(dir: &Path) -> std::io::Result<StaticServer> {
        let root = Arc::new(dir.canonicalize()?);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}/", listener.local_addr()?);
        let app = Router::new().fallback(answer).with_state(root);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(StaticServer { base, task })
    }
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(State(root): State<Arc<PathBuf>>, request: Request) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n").into_response();
    }
    let Some(path) = resolve(&root, request.uri().path()) else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    let Ok(bytes) = tokio::fs::read(&path).await else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    let range = request
        .headers()
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(|v| byte_range(v, bytes.len()));
    let total = bytes.len();
    let (status, body, content_range) = match range {
        None => (StatusCode::OK, bytes, None),
        Some(Some((start, end))) => (
            StatusCode::PARTIAL_CONTENT,
            bytes[start..=end].to_vec(),
            Some(format!("bytes {start}-{end}/{total}")),
        ),
        Some(None) => {
            let mut response = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{total}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return response;
        }
    };
    let length = body.len();
    let body = if request.method() == Method::HEAD {
        Body::empty()
    } else {
        Body::from(body)
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&path)),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(range) = content_range.and_then(|r| HeaderValue::from_str(&r).ok()) {
        headers.insert(header::CONTENT_RANGE, range);
    }
    response
}

/// The file a URL path names under `root`: percent-decoded, no part that
/// leaves the directory (also through a symlink), a directory's
/// `index.html`.
fn resolve(root: &Path, url_path: &str) -> Option<PathBuf> {
    let decoded = percent_decode(url_path)?;
    let relative = Path::new(decoded.trim_start_matches('/'));
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return None;
    }
    let mut path = root.join(relative);
    if path.is_dir() {
        path = path.join("index.html");
    }
    let real = path.canonicalize().ok()?;
    (real.starts_with(root) && real.is_file()).then_some(real)
}

/// `%2F`-style escapes decoded; `None` for a broken escape or bytes that
/// are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The first and last byte of a `Range: bytes=...` header over a file of
/// `len` bytes; `None` when it cannot be satisfied. Only one range is
/// served (a multipart answer is what no game loader asks for).
fn byte_range(header: &str, len: usize) -> Option<(usize, usize)> {
    let spec = header.trim().strip_prefix("bytes=")?;
    let first = spec.split(',').next()?.trim();
    let (start, end) = first.split_once('-')?;
    if len == 0 {
        return None;
    }
    let (start, end) = match (start.trim(), end.trim()) {
        ("", suffix) => {
            let n: usize = suffix.parse().ok()?;
            if n == 0 {
                return None;
            }
            (len.saturating_sub(n), len - 1)
        }
        (start, "") => (start.parse().ok()?, len - 1),
        (start, end) => {
            let end: usize = end.parse().ok()?;
            (start.parse().ok()?, end.min(len - 1))
        }
    };
    (start <= end && start < len).then_some((start, end))
}

/// The content type of a file by its extension (what browsers need to run
/// scripts and modules, show images and load fonts, media and wasm).
fn content_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "js" | "mjs" | "cjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "txt" | "md" => "text/plain; charset=utf-8",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "otf" => "font/otf",
        "eot" => "application/vnd.ms-fontobject",
        "wasm" => "application/wasm",
        "mp3" => "audio/mpeg",
        "ogg" | "oga" => "audio/ogg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_browsers_send_them() {
        assert_eq!(byte_range("bytes=0-9", 100), Some((0, 9)));
        assert_eq!(byte_range("bytes=90-", 100), Some((90, 99)));
        assert_eq!(byte_range("bytes=-10", 100), Some((90, 99)));
        assert_eq!(byte_range("bytes=95-200", 100), Some((95, 99)));
        assert_eq!(byte_range("bytes=100-", 100), None, "past the end: 416");
        assert_eq!(byte_range("bytes=9-0", 100), None);
        assert_eq!(byte_range("items=0-9", 100), None);
        assert_eq!(byte_range("bytes=0-0", 0), None);
    }

    #[test]
    fn a_path_never_leaves_the_served_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("site");
        std::fs::create_dir_all(root.join("js")).expect("mkdir");
        std::fs::write(root.join("index.html"), "<p>hi").expect("write");
        std::fs::write(root.join("js/game.js"), "1").expect("write");
        std::fs::write(dir.path().join("secret.txt"), "no").expect("write");
        let root = root.canonicalize().expect("canonical");
        assert_eq!(resolve(&root, "/"), Some(root.join("index.html")));
        assert_eq!(resolve(&root, "/js/game.js"), Some(root.join("js/game.js")));
        assert_eq!(
            resolve(&root, "/js%2Fgame.js"),
            Some(root.join("js/game.js"))
        );
        assert_eq!(resolve(&root, "/../secret.txt"), None);
        assert_eq!(resolve(&root, "/%2e%2e/secret.txt"), None);
        assert_eq!(resolve(&root, "/missing.js"), None);
        assert_eq!(resolve(&root, "/%zz"), None);
    }

    #[test]
    fn scripts_styles_fonts_and_wasm_get_the_types_browsers_require() {
        for (name, expected) in [
            ("a.js", "text/javascript; charset=utf-8"),
            ("a.mjs", "text/javascript; charset=utf-8"),
            ("a.css", "text/css; charset=utf-8"),
            ("a.WASM", "application/wasm"),
            ("a.woff2", "font/woff2"),
            ("a.svg", "image/svg+xml"),
            ("noext", "application/octet-stream"),
        ] {
            assert_eq!(content_type(Path::new(name)), expected, "{name}");
        }
    }
}
