//! The last bytes a process wrote: what a crash report, a lens's dump or
//! an error message quotes of its stderr, without holding all it wrote.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt};

/// The last `cap` bytes of what one or more pipes of a process wrote (the
/// pipes' bytes interleaved as they arrive), readable while it runs.
#[derive(Debug, Clone)]
pub struct Tail {
    kept: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl Tail {
    /// A tail that keeps `cap` bytes.
    pub fn new(cap: usize) -> Tail {
        Tail {
            kept: Arc::default(),
            cap,
        }
    }

    /// Reads `pipe` to its end on a task of its own, keeping what it
    /// writes; the task ends when the pipe closes (or fails).
    pub fn keep(
        &self,
        mut pipe: impl AsyncRead + Send + Unpin + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let tail = self.clone();
        tokio::spawn(async move {
            let mut chunk = vec![0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                tail.push(&chunk[..n]);
            }
        })
    }

    fn push(&self, bytes: &[u8]) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.extend_from_slice(bytes);
        // Trimmed in batches: one move per `cap` bytes, not per read.
        if kept.len() > 2 * self.cap {
            let excess = kept.len() - self.cap;
            kept.drain(..excess);
        }
    }

    /// The last `cap` bytes kept, as text (lossy UTF-8: a character cut at
    /// the start shows as `�`).
    pub fn text(&self) -> String {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let start = kept.len().saturating_sub(self.cap);
        String::from_utf8_lossy(&kept[start..]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stderr_over_the_cap_keeps_its_end() {
        let mut child = tokio::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 500 ]; do echo \"noise $i\" >&2; i=$((i+1)); done; echo LAST >&2",
            ])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let tail = Tail::new(100);
        let reader = tail.keep(child.stderr.take().expect("stderr"));
        child.wait().await.expect("wait");
        reader.await.expect("the reader ends with the pipe");
        let text = tail.text();
        assert_eq!(text.len(), 100, "{text}");
        assert!(text.ends_with("noise 499\nLAST\n"), "{text}");
        assert!(!text.contains("noise 1\n"), "the head is dropped: {text}");
    }

    #[tokio::test]
    async fn two_pipes_share_one_tail_and_a_short_one_is_kept_whole() {
        let tail = Tail::new(1024);
        let (first, second) = (tail.keep(&b"one\n"[..]), tail.keep(&b"two\n"[..]));
        first.await.expect("first");
        second.await.expect("second");
        let text = tail.text();
        assert!(text == "one\ntwo\n" || text == "two\none\n", "{text}");
    }
}
