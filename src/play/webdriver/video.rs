//! A browser cell's video: one frame per observation, a screencast of the
//! cell a reviewer watches beside its findings (docs/web-games.md, "The
//! video").
//!
//! Every observation already takes a screenshot (its `screen` signature);
//! `screen::read` hands back that picture at half size from the rows it
//! decodes anyway, and the [`Recorder`] appends it to `video.png`, an
//! animated PNG (APNG) written as the cell plays (on a thread of its own,
//! while the next action goes on: [`film`]): each frame compressed
//! alone (the `png` crate's fastest deflate) and its image data written as
//! the APNG's next frame, so memory holds one frame and nothing is
//! encoded again at the end. At the cell's end the frame count is
//! written into the header, and with `ffmpeg` on the game's `PATH` the
//! animation becomes `video.webm` (VP8), the APNG then removed; without
//! ffmpeg, or when it fails (said in the cell's notes), `video.png` stays.
//! Frames are [`FPS`] a second, so a viewer can follow each action; the
//! video stops at the plan's `budget.max_video_frames`, and says so.
//!
//! Owns the file format and the frame count; what a frame shows and when
//! one is taken is the session's.

use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::screen::Frame;
use crate::play::cell_report::Video;

/// Frames a second: an action every half second, slow enough to follow.
pub const FPS: u32 = 2;
/// The animation being written, in the cell's directory.
pub const APNG: &str = "video.png";
/// The video made from it by ffmpeg.
pub const WEBM: &str = "video.webm";
/// How long ffmpeg may take, besides [`FFMPEG_PER_FRAME`] per frame.
const FFMPEG_WITHIN: Duration = Duration::from_secs(30);
const FFMPEG_PER_FRAME: Duration = Duration::from_millis(200);

const SIGNATURE: [u8; 8] = [137, 80, 78, 71, 13, 10, 26, 10];
/// Where the `acTL` chunk's frame count sits: after the signature (8),
/// `IHDR` (25) and the chunk's length and type (8).
const FRAME_COUNT_AT: u64 = 8 + 25 + 8;

/// The video of one cell, being written.
pub struct Recorder {
    dir: PathBuf,
    file: Option<std::fs::File>,
    /// Frames at most.
    max: u64,
    /// The first frame's size: every frame is drawn at it.
    size: (u32, u32),
    /// Each frame's screenshot name, in order.
    shots: Vec<String>,
    /// The APNG's chunk sequence number, next.
    sequence: u32,
    /// Observations past [`Recorder::max`], not filmed.
    skipped: u64,
    /// What went wrong writing, once: the video is then given up.
    failed: Option<String>,
}

impl Recorder {
    /// The recorder of a cell whose directory is `dir`, `video` frames at
    /// most (none without a directory, or with `budget.video = false`),
    /// shared with the screenshot writes.
    pub fn of(
        video: Option<u64>,
        dir: Option<&Path>,
    ) -> Option<std::sync::Arc<std::sync::Mutex<Recorder>>> {
        let (max, dir) = video.zip(dir)?;
        Some(std::sync::Arc::new(std::sync::Mutex::new(Recorder::new(
            dir, max,
        ))))
    }

    /// A recorder writing into the cell's directory `dir`, `max` frames at most.
    pub fn new(dir: &Path, max: u64) -> Recorder {
        Recorder {
            dir: dir.to_path_buf(),
            file: None,
            max,
            size: (0, 0),
            shots: Vec::new(),
            sequence: 0,
            skipped: 0,
            failed: None,
        }
    }

    /// Adds the frame of the observation whose screenshot is `shot`. An
    /// observation made again under the same name (the page taken back
    /// after it left the game) replaces nothing: its first frame stays.
    pub fn add(&mut self, shot: &str, frame: &Frame) {
        if self.failed.is_some() || self.shots.last().is_some_and(|last| last == shot) {
            return;
        }
        if self.shots.len() as u64 >= self.max {
            self.skipped += 1;
            return;
        }
        if let Err(e) = self.write_frame(frame) {
            self.failed = Some(format!("the video could not be written: {e}"));
            self.file = None;
            let _ = std::fs::remove_file(self.dir.join(APNG));
            return;
        }
        self.shots.push(shot.to_owned());
    }

    fn write_frame(&mut self, frame: &Frame) -> std::io::Result<()> {
        if self.file.is_none() {
            self.size = (frame.width, frame.height);
            let mut file = std::fs::File::create(self.dir.join(APNG))?;
            let mut head = SIGNATURE.to_vec();
            let mut ihdr = Vec::with_capacity(13);
            ihdr.extend(frame.width.to_be_bytes());
            ihdr.extend(frame.height.to_be_bytes());
            ihdr.extend([8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no interlace
            chunk(&mut head, *b"IHDR", &ihdr);
            // The frame count is written at the end, when it is known.
            chunk(&mut head, *b"acTL", &[0, 0, 0, 0, 0, 0, 0, 0]);
            file.write_all(&head)?;
            self.file = Some(file);
        }
        let data = compressed(&fitted(frame, self.size), self.size)?;
        let mut out = Vec::with_capacity(data.len() + 64);
        let mut fctl = Vec::with_capacity(26);
        fctl.extend(self.next_sequence().to_be_bytes());
        fctl.extend(self.size.0.to_be_bytes());
        fctl.extend(self.size.1.to_be_bytes());
        fctl.extend([0u8; 8]); // at the top left
        fctl.extend(1u16.to_be_bytes());
        fctl.extend(u16::try_from(FPS).unwrap_or(1).to_be_bytes());
        fctl.extend([0, 0]); // no dispose, source blend: each frame whole
        chunk(&mut out, *b"fcTL", &fctl);
        if self.shots.is_empty() {
            chunk(&mut out, *b"IDAT", &data);
        } else {
            let mut fdat = Vec::with_capacity(data.len() + 4);
            fdat.extend(self.next_sequence().to_be_bytes());
            fdat.extend(&data);
            chunk(&mut out, *b"fdAT", &fdat);
        }
        match self.file.as_mut() {
            Some(file) => file.write_all(&out),
            None => Ok(()),
        }
    }

    fn next_sequence(&mut self) -> u32 {
        self.sequence += 1;
        self.sequence - 1
    }

    /// Ends the video: its frame count written, and with `ffmpeg` (a path)
    /// made into webm. The video, if any frame was filmed, and the notes
    /// to add to the cell's.
    pub fn finish(mut self, ffmpeg: Option<&Path>) -> (Option<Video>, Vec<String>) {
        let mut notes = Vec::new();
        if let Some(failed) = self.failed.take() {
            notes.push(failed);
        }
        let frames = self.shots.len() as u64;
        if self.skipped > 0 {
            notes.push(format!(
                "the video stops at its {} frames (`budget.max_video_frames`): the {} \
                 observations after are in screenshots/ only",
                self.max, self.skipped
            ));
        }
        let Some(mut file) = self.file.take() else {
            return (None, notes);
        };
        if let Err(e) = close(&mut file, u32::try_from(frames).unwrap_or(u32::MAX)) {
            notes.push(format!("the video could not be written: {e}"));
            let _ = std::fs::remove_file(self.dir.join(APNG));
            return (None, notes);
        }
        drop(file);
        let mut video = Video {
            path: APNG.to_owned(),
            format: "apng".to_owned(),
            frames,
            fps: FPS,
            shots: self.shots,
            size: self.size,
        };
        if let Some(ffmpeg) = ffmpeg {
            match webm(ffmpeg, &self.dir, frames) {
                Ok(()) => {
                    let _ = std::fs::remove_file(self.dir.join(APNG));
                    WEBM.clone_into(&mut video.path);
                    "webm".clone_into(&mut video.format);
                }
                Err(why) => {
                    let _ = std::fs::remove_file(self.dir.join(WEBM));
                    notes.push(format!(
                        "ffmpeg could not make the video ({why}): it is the animated {APNG}"
                    ));
                }
            }
        }
        (Some(video), notes)
    }
}

/// Adds `frame` (of the screenshot `shot`) to `video` once the frame
/// before it (`after`) is in, on a thread of its own: the play does not
/// wait for it.
pub fn film(
    video: std::sync::Arc<std::sync::Mutex<Recorder>>,
    after: Option<tokio::task::JoinHandle<()>>,
    shot: String,
    frame: Frame,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Some(after) = after {
            let _ = after.await;
        }
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(mut video) = video.lock() {
                video.add(&shot, &frame);
            }
        })
        .await;
    })
}

/// A video being ended (its frame count written, and made into `WebM` by
/// ffmpeg when there is one) while the cell shuts its browser down: what
/// it came to, and the notes to add to the cell's.
pub type Ending = tokio::task::JoinHandle<(Option<crate::play::cell_report::Video>, Vec<String>)>;

impl super::BrowserSession {
    /// Stops filming (after the last frame is in) and ends the video on
    /// the blocking pool: ffmpeg's start and encoding (a tenth of a second
    /// and more) then overlap the browser's shutdown instead of adding to
    /// the cell's time. `None` when none was filmed.
    pub async fn end_video(&mut self) -> Option<Ending> {
        let _ = self
            .finish_screenshot(crate::play::protocol::Op::Close)
            .await;
        if let Some(last) = self.pending_frame.take() {
            let _ = last.await;
        }
        let recorder = std::sync::Arc::try_unwrap(self.video.take()?).ok()?;
        let recorder = recorder.into_inner().ok()?;
        let ffmpeg = self.ffmpeg.clone();
        Some(tokio::task::spawn_blocking(move || {
            recorder.finish(ffmpeg.as_deref())
        }))
    }
}

/// Writes the frame count into `acTL` and ends the file.
fn close(file: &mut std::fs::File, frames: u32) -> std::io::Result<()> {
    let mut actl = Vec::with_capacity(8);
    actl.extend(frames.to_be_bytes());
    actl.extend(0u32.to_be_bytes()); // plays on in a loop
    let mut whole = Vec::with_capacity(20);
    chunk(&mut whole, *b"acTL", &actl);
    let mut end = Vec::with_capacity(12);
    chunk(&mut end, *b"IEND", &[]);
    file.seek(SeekFrom::End(0))?;
    file.write_all(&end)?;
    file.seek(SeekFrom::Start(FRAME_COUNT_AT - 8))?;
    file.write_all(&whole)?;
    file.flush()
}

/// `video.png` made into `video.webm` by `ffmpeg` within its time.
fn webm(ffmpeg: &Path, dir: &Path, frames: u64) -> Result<(), String> {
    let mut child = std::process::Command::new(ffmpeg)
        .current_dir(dir)
        .args([
            "-nostdin",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "apng",
            "-i",
            APNG,
        ])
        .args([
            "-vf",
            "pad=ceil(iw/2)*2:ceil(ih/2)*2",
            "-r",
            &FPS.to_string(),
        ])
        .args(["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8"])
        .args(["-b:v", "1M", "-pix_fmt", "yuv420p", WEBM])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let within = FFMPEG_WITHIN + FFMPEG_PER_FRAME * u32::try_from(frames).unwrap_or(u32::MAX);
    let started = std::time::Instant::now();
    loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) if status.success() => return Ok(()),
            Some(status) => {
                let mut said = String::new();
                if let Some(mut err) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut err, &mut said);
                }
                let said = said.lines().next().unwrap_or("").trim().to_owned();
                return Err(format!("{status}: {said}"));
            }
            None if started.elapsed() > within => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no end within {} s", within.as_secs()));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// `frame` at `size`: as it is, or drawn at it (nearest pixel) when the
/// window changed size.
fn fitted(frame: &Frame, size: (u32, u32)) -> std::borrow::Cow<'_, [u8]> {
    if (frame.width, frame.height) == size {
        return std::borrow::Cow::Borrowed(&frame.rgb);
    }
    let (w, h) = (size.0 as usize, size.1 as usize);
    let (fw, fh) = (frame.width as usize, frame.height as usize);
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        let sy = y * fh / h.max(1);
        for x in 0..w {
            let at = (sy * fw + x * fw / w.max(1)) * 3;
            out.extend(frame.rgb.get(at..at + 3).unwrap_or(&[0, 0, 0]));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The zlib stream of one RGB frame's image data: the `png` crate encodes
/// it as a picture of its own, whose `IDAT` chunks hold it.
fn compressed(rgb: &[u8], (width, height): (u32, u32)) -> std::io::Result<Vec<u8>> {
    let mut png = Vec::with_capacity(rgb.len() / 4);
    let mut encoder = png::Encoder::new(&mut png, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    // The fastest: the `Up` filter and fdeflate's quickest mode (pages
    // are mostly flat colour; `Fast` tries five filters a row and cost
    // the cell more than the video's 15%).
    encoder.set_compression(png::Compression::Fastest);
    let mut writer = encoder.write_header().map_err(std::io::Error::other)?;
    writer
        .write_image_data(rgb)
        .map_err(std::io::Error::other)?;
    writer.finish().map_err(std::io::Error::other)?;
    // The chunks after the signature: length, type, data, CRC.
    let mut data = Vec::with_capacity(png.len());
    let mut at = SIGNATURE.len();
    while at + 12 <= png.len() {
        let length = u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]) as usize;
        let body = png.get(at + 8..at + 8 + length).unwrap_or_default();
        if &png[at + 4..at + 8] == b"IDAT" {
            data.extend(body);
        }
        at += 12 + length;
    }
    Ok(data)
}

/// Appends the PNG chunk `kind` holding `data` to `out`.
fn chunk(out: &mut Vec<u8>, kind: [u8; 4], data: &[u8]) {
    out.extend(u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend(kind);
    out.extend(data);
    let mut crc = Crc::new();
    crc.update(&kind);
    crc.update(data);
    out.extend(crc.finish().to_be_bytes());
}

/// CRC-32 (ISO 3309), as PNG chunks carry it.
struct Crc(u32);

impl Crc {
    fn new() -> Crc {
        Crc(0xFFFF_FFFF)
    }

    fn update(&mut self, bytes: &[u8]) {
        static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
        let table = TABLE.get_or_init(|| {
            let mut table = [0u32; 256];
            for (n, slot) in (0u32..).zip(table.iter_mut()) {
                let mut c = n;
                for _ in 0..8 {
                    c = if c & 1 == 1 {
                        0xEDB8_8320 ^ (c >> 1)
                    } else {
                        c >> 1
                    };
                }
                *slot = c;
            }
            table
        });
        for &b in bytes {
            self.0 = table[((self.0 ^ u32::from(b)) & 0xFF) as usize] ^ (self.0 >> 8);
        }
    }

    fn finish(&self) -> u32 {
        self.0 ^ 0xFFFF_FFFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(width: u32, height: u32, shade: u8) -> Frame {
        Frame {
            width,
            height,
            rgb: vec![shade; (width * height * 3) as usize],
        }
    }

    /// The frames of the APNG at `path`: their count in `acTL`, and each
    /// frame's first pixel, decoded by the `png` crate.
    fn decoded(path: &Path) -> (u32, Vec<u8>) {
        let file = std::io::BufReader::new(std::fs::File::open(path).expect("the video"));
        let mut reader = png::Decoder::new(file).read_info().expect("a PNG");
        let count = reader
            .info()
            .animation_control
            .expect("an animated PNG")
            .num_frames;
        let mut firsts = Vec::new();
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        while let Ok(info) = reader.next_frame(&mut buf) {
            firsts.push(buf[0]);
            assert_eq!((info.width, info.height), (8, 6));
        }
        (count, firsts)
    }

    #[test]
    fn the_frames_make_an_animated_png_a_browser_plays() {
        let dir = tempfile::tempdir().expect("dir");
        let mut recorder = Recorder::new(dir.path(), 10);
        recorder.add("reset-2.png", &frame(8, 6, 10));
        recorder.add("step-0001.png", &frame(8, 6, 20));
        // The page taken back under the same name: its first frame stays.
        recorder.add("step-0001.png", &frame(8, 6, 99));
        // A window of another size is drawn at the first's.
        recorder.add("step-0002.png", &frame(16, 12, 30));
        let (video, notes) = recorder.finish(None);
        let video = video.expect("a video");
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(video.format, "apng");
        assert_eq!(video.frames, 3);
        assert_eq!(
            video.shots,
            ["reset-2.png", "step-0001.png", "step-0002.png"]
        );
        assert_eq!(video.size, (8, 6));
        assert_eq!(decoded(&dir.path().join(APNG)), (3, vec![10, 20, 30]));
    }

    #[test]
    fn past_its_frames_the_video_stops_and_says_so() {
        let dir = tempfile::tempdir().expect("dir");
        let mut recorder = Recorder::new(dir.path(), 2);
        for k in 0..5u8 {
            recorder.add(&format!("step-{k:04}.png"), &frame(8, 6, k));
        }
        let (video, notes) = recorder.finish(None);
        assert_eq!(video.expect("a video").frames, 2);
        assert_eq!(decoded(&dir.path().join(APNG)).0, 2);
        assert!(
            notes[0].contains("stops at its 2 frames") && notes[0].contains("the 3 observations"),
            "{notes:?}"
        );
    }

    #[test]
    fn no_frame_no_video_and_a_failed_ffmpeg_leaves_the_animation() {
        let dir = tempfile::tempdir().expect("dir");
        assert_eq!(Recorder::new(dir.path(), 5).finish(None), (None, vec![]));
        let mut recorder = Recorder::new(dir.path(), 5);
        recorder.add("step-0001.png", &frame(8, 6, 1));
        let (video, notes) = recorder.finish(Some(Path::new("/bin/false")));
        assert_eq!(video.expect("a video").path, APNG);
        assert!(
            notes[0].starts_with("ffmpeg could not make the video"),
            "{notes:?}"
        );
        assert!(dir.path().join(APNG).is_file());
        assert!(!dir.path().join(WEBM).exists());
    }
}
