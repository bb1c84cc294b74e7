//! What the screen shows, as a short string: the visual signature of a
//! page's observation (its `screen` field), made from the screenshot taken
//! for that observation.
//!
//! A game drawn on a `<canvas>` has no text or controls that change as it
//! is played; without this, every observation of it is the same and a
//! replay compares nothing. The screenshot is decoded, averaged over a
//! [`COLUMNS`] x [`ROWS`] grid of cells (each cell the mean of its pixels,
//! so a one-pixel seam of anti-aliasing moves a cell's mean by a fraction
//! of a level), each cell's luma quantized to [`LEVELS`] levels, and the
//! grid written as its digest. A sprite that moves by its own width on a
//! canvas changes the cells it leaves and enters (a mean over a cell does
//! not see a move inside it: cells are kept near a sprite's size, 20 px in
//! a 1280 px window); a blinking text caret is hidden while pages are read
//! (`page.js`). Why these sizes: docs/web-games.md ("What a browser cell
//! sees and does") gives the measurements.
//!
//! Owns decoding and encoding only; when to capture is the session's.

use std::fmt::Write as _;
use std::io::Cursor;

use sha2::Digest as _;

/// Cells across the grid.
pub const COLUMNS: usize = 64;
/// Cells down the grid.
pub const ROWS: usize = 40;
/// Gray levels per cell.
pub const LEVELS: u32 = 8;

/// Hex digits of the grid's digest kept in the signature: 128 bits.
const DIGEST_HEX: usize = 32;

/// A picture at half the screenshot's width and height (every other
/// pixel of every other row), 8-bit RGB: a frame of the cell's video.
pub struct Frame {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

/// The signature of a PNG screenshot; what is wrong with the picture
/// otherwise.
#[cfg(test)]
pub fn signature(png_bytes: &[u8]) -> Result<String, String> {
    read(png_bytes, false).map(|(signature, _)| signature)
}

/// The signature of a PNG screenshot and, when `frame`, the picture at
/// half size (the very pixels the signature reads: a copy of them more);
/// what is wrong with the picture otherwise.
pub fn read(png_bytes: &[u8], frame: bool) -> Result<(String, Option<Frame>), String> {
    let mut decoder = png::Decoder::new(Cursor::new(png_bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder
        .read_info()
        .map_err(|e| format!("the screenshot is no PNG: {e}"))?;
    let (width, height) = (reader.info().width as usize, reader.info().height as usize);
    if width == 0 || height == 0 {
        return Err("the screenshot is empty".to_owned());
    }
    let (color, _) = reader.output_color_type();
    let channels = color.samples();
    // Luma sums (x1000 weights) and pixel counts per cell.
    let mut sums = vec![0u64; COLUMNS * ROWS];
    let mut counts = vec![0u64; COLUMNS * ROWS];
    // Every other pixel of every other row: a quarter of the work (this
    // runs once per observation) and still the mean of hundreds of pixels
    // per cell.
    let column_of: Vec<usize> = (0..width).step_by(2).map(|x| x * COLUMNS / width).collect();
    let stride = channels * 2;
    // The frame: the pixels the signature reads, as they are.
    let mut rgb = frame.then(|| Vec::with_capacity(column_of.len() * height.div_ceil(2) * 3));
    let mut y = 0;
    while let Some(row) = reader
        .next_row()
        .map_err(|e| format!("the screenshot could not be decoded: {e}"))?
    {
        if y >= height {
            break;
        }
        if y % 2 == 0 {
            let cells = y * ROWS / height * COLUMNS;
            let data = row.data();
            for (i, column) in column_of.iter().enumerate() {
                let at = i * stride;
                let luma = if channels >= 3 {
                    299 * u64::from(data[at])
                        + 587 * u64::from(data[at + 1])
                        + 114 * u64::from(data[at + 2])
                } else {
                    1000 * u64::from(data[at])
                };
                sums[cells + column] += luma;
                counts[cells + column] += 1;
            }
            if let Some(rgb) = rgb.as_mut() {
                // Every other pixel (the last one of an odd width too).
                for pixel in data.chunks(stride) {
                    if channels >= 3 {
                        rgb.extend_from_slice(&pixel[..3]);
                    } else {
                        rgb.extend_from_slice(&[pixel[0]; 3]);
                    }
                }
            }
        }
        y += 1;
    }
    let levels: Vec<u8> = sums
        .iter()
        .zip(&counts)
        .map(|(&sum, &count)| quantize(sum / count.max(1)))
        .collect();
    // The grid itself would be 1,280 characters in every observation of
    // the transcript; its digest says the same to the hash (the screenshot
    // shows what changed).
    let digest = sha2::Sha256::digest(&levels);
    let mut out = format!("{COLUMNS}x{ROWS}x{LEVELS}:");
    for byte in digest.iter().take(DIGEST_HEX / 2) {
        let _ = write!(out, "{byte:02x}");
    }
    let frame = rgb.map(|rgb| {
        let across = column_of.len();
        Frame {
            width: u32::try_from(across).unwrap_or(u32::MAX),
            height: u32::try_from(rgb.len() / (across * 3).max(1)).unwrap_or(u32::MAX),
            rgb,
        }
    });
    Ok((out, frame))
}

/// A cell's mean luma (`0..=255_000`) as one of [`LEVELS`] levels.
fn quantize(mean: u64) -> u8 {
    let level = mean * u64::from(LEVELS) / 255_001;
    u8::try_from(level.min(u64::from(LEVELS - 1))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `width` x `height` RGB PNG whose pixel at (x, y) is `paint(x, y)`.
    fn png_of(width: u32, height: u32, paint: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("header");
        let mut data = Vec::new();
        for y in 0..height {
            for x in 0..width {
                data.extend(paint(x, y));
            }
        }
        writer.write_image_data(&data).expect("data");
        writer.finish().expect("finish");
        out
    }

    fn sprite_at(left: u32, top: u32) -> impl Fn(u32, u32) -> [u8; 3] {
        move |x, y| {
            if (left..left + 16).contains(&x) && (top..top + 16).contains(&y) {
                [255, 220, 0]
            } else {
                [0, 0, 40]
            }
        }
    }

    #[test]
    fn a_sprite_that_moves_a_few_pixels_changes_the_signature() {
        // Cells are 12.5 px wide here: the sprite moves half its width.
        let here = signature(&png_of(800, 600, sprite_at(392, 300))).expect("sig");
        let moved = signature(&png_of(800, 600, sprite_at(400, 300))).expect("sig");
        let again = signature(&png_of(800, 600, sprite_at(392, 300))).expect("sig");
        assert_ne!(here, moved);
        assert_eq!(here, again);
        assert!(here.starts_with("64x40x8:"), "{here}");
        assert_eq!(here.len(), "64x40x8:".len() + DIGEST_HEX);
        // In a 1280 px wide window (20 px cells), a 16 px sprite one step
        // of 16 px to the side.
        let wide = signature(&png_of(1280, 800, sprite_at(608, 300))).expect("sig");
        let stepped = signature(&png_of(1280, 800, sprite_at(624, 300))).expect("sig");
        assert_ne!(wide, stepped);
    }

    #[test]
    fn a_faint_one_pixel_seam_does_not_change_it() {
        let plain = signature(&png_of(800, 600, |_, _| [30, 30, 30])).expect("sig");
        // Anti-aliasing: a one-pixel line a few levels lighter.
        let seam = signature(&png_of(800, 600, |x, _| {
            if x == 333 { [60, 60, 60] } else { [30, 30, 30] }
        }))
        .expect("sig");
        assert_eq!(plain, seam);
    }

    #[test]
    fn the_frame_is_the_picture_at_half_size() {
        let png = png_of(
            80,
            60,
            |x, _| if x < 40 { [200, 100, 0] } else { [0, 0, 40] },
        );
        let (sig, frame) = read(&png, true).expect("read");
        assert_eq!(sig, signature(&png).expect("sig"));
        let frame = frame.expect("a frame");
        assert_eq!((frame.width, frame.height), (40, 30));
        assert_eq!(frame.rgb.len(), 40 * 30 * 3);
        assert_eq!(&frame.rgb[..3], &[200, 100, 0]);
        assert_eq!(&frame.rgb[frame.rgb.len() - 3..], &[0, 0, 40]);
        assert!(read(&png, false).expect("read").1.is_none());
    }

    #[test]
    fn what_is_no_png_is_said() {
        let err = signature(b"not a picture").expect_err("no png");
        assert!(err.contains("no PNG"), "{err}");
    }
}
