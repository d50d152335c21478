//! Judging an uploaded file by its bytes: which of the accepted image types
//! it is (whatever its name or declared type), its dimensions, and a copy
//! without location and other metadata.
//!
//! Accepted: JPEG, PNG, GIF, WebP, HEIC and HEIF. A file whose leading bytes
//! are none of these, an empty file, or one whose header is cut short is
//! refused with `UNSUPPORTED_MEDIA_TYPE`. EXIF (with its GPS position), XMP,
//! IPTC and text chunks are removed from JPEG, PNG and WebP, so a moment's own
//! coordinates are the only place a position is published. The one EXIF
//! field kept is the orientation, rewritten alone, so phone photos still
//! display upright. HEIC and HEIF keep EXIF and XMP as items of their own:
//! their bytes are overwritten where they lie (see [`blank_heif_metadata`]).
//! A file whose metadata cannot be found with certainty is refused rather
//! than stored with it.
//!
//! Nothing rides along behind or beside the image: a JPEG ends at the EOI
//! of its first image (the further images phones append, MPF, each with its
//! own EXIF, are dropped with the APP2 segment that indexes them); PNG and
//! WebP keep only the chunks that draw the image; a GIF keeps its frames,
//! their timing and the looping extension, and loses comments and every
//! other application extension (XMP among them); bytes after a GIF's
//! trailer, a PNG's IEND, a WebP's RIFF or a HEIF's last box are dropped. An
//! image whose header claims more than the configured number of pixels is
//! refused.

use bytes::Bytes;
use heifer_isobmff::{BoxIter, HeifFile, RawBox};
use imagesize::ImageType;
use img_parts::ImageEXIF;
use img_parts::jpeg::{Jpeg, markers};
use img_parts::png::Png;
use img_parts::riff::{RiffChunk, RiffContent};
use img_parts::webp::WebP;

use crate::error::{AppError, AppResult};

/// The content types a media may have.
pub const ACCEPTED_TYPES: [&str; 6] = [
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/webp",
    "image/heic",
    "image/heif",
];

/// An accepted image, ready to store.
#[derive(Debug)]
pub struct Judged {
    pub content_type: &'static str,
    pub width: Option<i32>,
    pub height: Option<i32>,
    /// The bytes to store: the upload without its metadata.
    pub bytes: Bytes,
}

fn unsupported(why: &str) -> AppError {
    AppError::unsupported_media_type(format!(
        "{why}: accepted are JPEG, PNG, GIF, WebP, HEIC and HEIF, judged by the file's bytes"
    ))
}

/// The accepted type the leading bytes show, if any.
pub fn content_type_of(header: &[u8]) -> Option<&'static str> {
    match imagesize::image_type(header).ok()? {
        ImageType::Jpeg => Some("image/jpeg"),
        ImageType::Png => Some("image/png"),
        ImageType::Gif => Some("image/gif"),
        ImageType::Webp => Some("image/webp"),
        // HEVC-coded HEIF is HEIC; other HEIF brands (mif1, msf1) are HEIF.
        // AVIF, also HEIF-based, is not accepted.
        ImageType::Heif(imagesize::Compression::Hevc) => Some("image/heic"),
        ImageType::Heif(imagesize::Compression::Unknown) => Some("image/heif"),
        _ => None,
    }
}

/// Judges `bytes`: type, dimensions (at most `max_pixels`), metadata removed.
pub fn judge(bytes: Bytes, max_pixels: u64) -> AppResult<Judged> {
    if bytes.is_empty() {
        return Err(unsupported("the file is empty"));
    }
    let content_type =
        content_type_of(&bytes).ok_or_else(|| unsupported("the file is not an accepted image"))?;
    let size = imagesize::blob_size(&bytes)
        .map_err(|_| unsupported("the image header is truncated or corrupt"))?;
    let pixels = (size.width as u64).saturating_mul(size.height as u64);
    if pixels > max_pixels {
        return Err(AppError::unsupported_media_type(format!(
            "the image is {}×{} pixels; at most {max_pixels} pixels are accepted",
            size.width, size.height
        )));
    }
    let dimension = |n: usize| i32::try_from(n).ok().filter(|&n| n > 0);
    let bytes = strip_metadata(content_type, bytes)?;
    Ok(Judged {
        content_type,
        width: dimension(size.width),
        height: dimension(size.height),
        bytes,
    })
}

fn corrupt(_: img_parts::Error) -> AppError {
    unsupported("the image structure is truncated or corrupt")
}

/// Removes EXIF, XMP, IPTC, comments and text chunks; keeps ICC colour
/// profiles and the image data.
fn strip_metadata(content_type: &str, bytes: Bytes) -> AppResult<Bytes> {
    match content_type {
        "image/jpeg" => {
            let kept = kept_exif(Jpeg::from_bytes(bytes.clone()).map_err(corrupt)?.exif());
            // Every segment of the whole file walked, scans included, and
            // only what draws the image kept; then the orientation alone
            // written back as EXIF.
            let drawn = jpeg_drawn_only(&bytes)
                .ok_or_else(|| unsupported("the image data is truncated (no end of image)"))?;
            let mut jpeg = Jpeg::from_bytes(Bytes::from(drawn)).map_err(corrupt)?;
            jpeg.set_exif(kept);
            Ok(jpeg.encoder().bytes())
        }
        "image/png" => {
            let mut png = Png::from_bytes(bytes).map_err(corrupt)?;
            let kept = kept_exif(png.exif());
            png.chunks_mut().retain(|c| PNG_KEPT.contains(&c.kind()));
            png.set_exif(kept);
            Ok(png.encoder().bytes())
        }
        "image/webp" => {
            let mut webp = WebP::from_bytes(bytes).map_err(corrupt)?;
            let kept = kept_exif(webp.exif());
            webp.chunks_mut().retain(|c| WEBP_KEPT.contains(&c.id()));
            // An animation's frames hold chunks of their own: only what
            // draws the frame stays in each.
            for chunk in webp.chunks_mut().iter_mut() {
                if chunk.id() != *b"ANMF" {
                    continue;
                }
                let RiffContent::Data(data) = chunk.content() else {
                    return Err(unsupported("the image structure is truncated or corrupt"));
                };
                let frame = webp_frame_drawn_only(data)
                    .ok_or_else(|| unsupported("the image structure is truncated or corrupt"))?;
                *chunk = RiffChunk::new(*b"ANMF", RiffContent::Data(Bytes::from(frame)));
            }
            // Also rewrites the VP8X flags to match the chunks left.
            webp.set_exif(kept);
            Ok(webp.encoder().bytes())
        }
        "image/heic" | "image/heif" => blank_heif_metadata(heif_boxes_only(bytes)?),
        "image/gif" => strip_gif(&bytes),
        _ => Ok(bytes),
    }
}

/// PNG chunks that draw the image (APNG's included); every other ancillary
/// chunk (text, time, private ones of any size) is dropped.
const PNG_KEPT: [[u8; 4]; 15] = [
    *b"IHDR", *b"PLTE", *b"IDAT", *b"IEND", *b"tRNS", *b"gAMA", *b"cHRM", *b"sRGB", *b"iCCP",
    *b"sBIT", *b"bKGD", *b"pHYs", *b"acTL", *b"fcTL", *b"fdAT",
];

/// WebP chunks that draw the image (EXIF is rewritten apart).
const WEBP_KEPT: [[u8; 4]; 7] = [
    *b"VP8 ", *b"VP8L", *b"VP8X", *b"ALPH", *b"ANIM", *b"ANMF", *b"ICCP",
];

/// A JPEG's first image with only the segments that draw it: walked from
/// SOI to the first EOI, segment by segment (by their lengths) and scan by
/// scan (entropy-coded data byte by byte), so that nothing is missed where
/// it hides: between the scans of a progressive JPEG, after the last scan,
/// or after the EOI (dropped with every further image). Kept: the frame,
/// tables, scans and restart markers; the JFIF header without its
/// thumbnail; ICC profiles (APP2 `ICC_PROFILE`); Adobe's colour transform
/// (APP14 `Adobe`, which CMYK images need). Dropped: every other APPn (EXIF
/// and XMP in APP1, JFXX thumbnails in APP0, MPF and FlashPix in APP2,
/// APP3 "Meta", IPTC in APP13, ...), comments, and the reserved JPGn
/// markers. `None` if the file ends before its EOI.
fn jpeg_drawn_only(b: &[u8]) -> Option<Vec<u8>> {
    if b.get(..2)? != [0xFF, markers::SOI] {
        return None;
    }
    let mut out = Vec::with_capacity(b.len());
    out.extend_from_slice(&[0xFF, markers::SOI]);
    let mut i = 2;
    loop {
        while *b.get(i)? != 0xFF {
            i += 1;
        }
        while *b.get(i + 1)? == 0xFF {
            i += 1;
        }
        let marker = *b.get(i + 1)?;
        match marker {
            markers::EOI => {
                out.extend_from_slice(&[0xFF, markers::EOI]);
                return Some(out);
            }
            0x01 | 0xD0..=0xD7 => {
                out.extend_from_slice(&[0xFF, marker]);
                i += 2;
            }
            _ => {
                let len = usize::from(u16::from_be_bytes([*b.get(i + 2)?, *b.get(i + 3)?]));
                let segment = b.get(i..i + 2 + len)?;
                let contents = segment.get(4..)?;
                match marker {
                    // JFIF's header, its thumbnail dropped (zero by zero).
                    0xE0 if contents.starts_with(b"JFIF\0") && contents.len() >= 14 => {
                        out.extend_from_slice(&[0xFF, 0xE0, 0x00, 16]);
                        out.extend_from_slice(&contents[..12]);
                        out.extend_from_slice(&[0, 0]);
                    }
                    0xE2 if contents.starts_with(b"ICC_PROFILE\0") => {
                        out.extend_from_slice(segment)
                    }
                    0xEE if contents.starts_with(b"Adobe") => out.extend_from_slice(segment),
                    0xE0..=0xEF | markers::COM | 0xF0..=0xFD => {}
                    _ => out.extend_from_slice(segment),
                }
                i += 2 + len;
                if marker == markers::SOS {
                    // Entropy-coded data up to the next real marker.
                    let start = i;
                    loop {
                        if *b.get(i)? == 0xFF {
                            let next = *b.get(i + 1)?;
                            if next != 0x00 && next != 0xFF && !(0xD0..=0xD7).contains(&next) {
                                break;
                            }
                        }
                        i += 1;
                    }
                    out.extend_from_slice(b.get(start..i)?);
                }
            }
        }
    }
}

/// An animated WebP frame's payload (`ANMF`: a 16-byte frame header, then
/// chunks) with only the chunks that draw it (`ALPH`, `VP8 `, `VP8L`);
/// `None` if a chunk runs past the payload.
fn webp_frame_drawn_only(data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len());
    out.extend_from_slice(data.get(..16)?);
    let mut i = 16;
    while i < data.len() {
        let id = data.get(i..i + 4)?;
        let len = u32::from_le_bytes(data.get(i + 4..i + 8)?.try_into().ok()?);
        let len = usize::try_from(len).ok()?;
        let padded = len + (len & 1);
        let end = i.checked_add(8)?.checked_add(padded)?;
        let chunk = data.get(i..end.min(data.len()))?;
        if chunk.len() < 8 + len {
            return None;
        }
        if [*b"ALPH", *b"VP8 ", *b"VP8L"].iter().any(|k| k == id) {
            out.extend_from_slice(chunk);
            if chunk.len() < 8 + padded {
                out.push(0);
            }
        }
        i = end;
    }
    Some(out)
}

/// A GIF with only what draws it: header, colour tables, image
/// descriptors and their data, graphic control extensions and the
/// NETSCAPE2.0/ANIMEXTS1.0 looping extension, both rewritten in their
/// standard form (extra sub-blocks dropped); comments, plain-text
/// extensions (text browsers do not draw) and other application extensions
/// (XMP, private data) are dropped, and so is anything after the trailer. A structure that runs past the end of the
/// file is refused.
fn strip_gif(b: &[u8]) -> AppResult<Bytes> {
    let cut = || unsupported("the image structure is truncated or corrupt");
    let get = |i: usize| b.get(i).copied().ok_or_else(cut);
    // The data sub-blocks starting at `i`: the index after their terminator.
    let sub_blocks = |mut i: usize| -> AppResult<usize> {
        loop {
            let n = usize::from(get(i)?);
            i += 1 + n;
            if n == 0 {
                return Ok(i);
            }
        }
    };
    let colour_table = |flags: u8| {
        if flags & 0x80 != 0 {
            3usize << ((flags & 7) + 1)
        } else {
            0
        }
    };
    let mut out = Vec::with_capacity(b.len());
    let mut i = 13 + colour_table(get(10)?);
    out.extend_from_slice(b.get(..i).ok_or_else(cut)?);
    loop {
        match get(i)? {
            0x3B => {
                out.push(0x3B);
                return Ok(Bytes::from(out));
            }
            0x2C => {
                let flags = get(i + 9)?;
                let data = i + 10 + colour_table(flags) + 1; // + LZW code size
                let end = sub_blocks(data)?;
                out.extend_from_slice(b.get(i..end).ok_or_else(cut)?);
                i = end;
            }
            0x21 => {
                let label = get(i + 1)?;
                let end = sub_blocks(i + 2)?;
                let looping = label == 0xFF
                    && b.get(i + 2..i + 14)
                        .is_some_and(|a| a == b"\x0bNETSCAPE2.0" || a == b"\x0bANIMEXTS1.0");
                // Each kept extension is written anew in its one standard
                // form, so no sub-block beyond it rides along.
                if label == 0xF9 && get(i + 2)? == 4 {
                    // Graphic control: 4 bytes of timing and transparency.
                    out.extend_from_slice(&[0x21, 0xF9, 4]);
                    out.extend_from_slice(b.get(i + 3..i + 7).ok_or_else(cut)?);
                    out.push(0);
                } else if looping && get(i + 14)? == 3 && get(i + 15)? == 1 {
                    // Looping: sub-block 1 with the loop count, nothing else.
                    out.extend_from_slice(b.get(i..i + 14).ok_or_else(cut)?);
                    out.extend_from_slice(&[3, 1]);
                    out.extend_from_slice(b.get(i + 16..i + 18).ok_or_else(cut)?);
                    out.push(0);
                }
                i = end;
            }
            _ => return Err(cut()),
        }
    }
}

/// A HEIF file up to the end of its last top-level box of a kind HEIF
/// uses (`ftyp`, `meta`, `mdat`, `free`, `skip`): whatever follows (bytes
/// no box holds, or a box of another kind) is dropped. A file whose `meta`
/// box does not parse is refused.
fn heif_boxes_only(bytes: Bytes) -> AppResult<Bytes> {
    let mut end = 0;
    let mut meta = false;
    for top in BoxIter::new(&bytes) {
        let Ok(top) = top else { break };
        let kind = &top.header.box_type.0;
        if ![*b"ftyp", *b"meta", *b"mdat", *b"free", *b"skip"].contains(kind) {
            break;
        }
        meta |= kind == b"meta";
        end = usize::try_from(top.header.header_size)
            .ok()
            .and_then(|h| h.checked_add(top.content.len()))
            .and_then(|n| n.checked_add(top.offset))
            .ok_or_else(heif_unsure)?;
    }
    if !meta {
        return Err(unsupported("the image structure is truncated or corrupt"));
    }
    Ok(if end < bytes.len() {
        bytes.slice(..end)
    } else {
        bytes
    })
}

/// HEIF metadata: the EXIF item (GPS included) and XMP packets (`mime`
/// items of type `application/rdf+xml`), found through the `iinf` and
/// `iloc` tables, are overwritten in place: EXIF with an empty EXIF block
/// and zeros, XMP with spaces. No table, size or offset changes, and the
/// image items keep their properties (in HEIF the orientation is the
/// `irot`/`imir` property, not EXIF).
fn blank_heif_metadata(bytes: Bytes) -> AppResult<Bytes> {
    use heifer_isobmff::boxes::ConstructionMethod;

    let file = HeifFile::parse(&bytes).map_err(heif_corrupt)?;
    // Copied only when there is something to blank.
    let mut copy: Option<Vec<u8>> = None;
    for item in &file.items {
        let exif = item.item_type.0 == *b"Exif";
        let xmp = item.item_type.0 == *b"mime"
            && item
                .content_type
                .as_deref()
                .is_some_and(|t| t.starts_with("application/rdf+xml"));
        let Some(location) = item.location.as_ref().filter(|_| exif || xmp) else {
            continue;
        };
        let base = match location.construction_method {
            ConstructionMethod::File => 0,
            ConstructionMethod::Idat => idat_start(&bytes)?,
            ConstructionMethod::Item => return Err(heif_unsure()),
        };
        for (i, extent) in location.extents.iter().enumerate() {
            let start = usize::try_from(extent.offset)
                .ok()
                .and_then(|o| o.checked_add(base));
            let end = usize::try_from(extent.length)
                .ok()
                .filter(|&l| l > 0)
                .zip(start)
                .and_then(|(l, s)| s.checked_add(l));
            let (Some(start), Some(end)) = (start, end) else {
                return Err(heif_unsure());
            };
            let out = copy.get_or_insert_with(|| bytes.to_vec());
            let Some(data) = out.get_mut(start..end) else {
                return Err(heif_unsure());
            };
            if xmp {
                data.fill(b' ');
                continue;
            }
            data.fill(0);
            // The item starts with the offset of its TIFF header (0: right
            // after it), then a TIFF header whose first directory is empty.
            const EMPTY_EXIF: [u8; 18] =
                [0, 0, 0, 0, b'M', b'M', 0, 42, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0];
            if i == 0 && data.len() >= EMPTY_EXIF.len() {
                data[..EMPTY_EXIF.len()].copy_from_slice(&EMPTY_EXIF);
            }
        }
    }
    drop(file);
    Ok(copy.map_or(bytes, Bytes::from))
}

/// Where the content of the `meta` box's `idat` box starts in `bytes`.
fn idat_start(bytes: &[u8]) -> AppResult<usize> {
    let header = |b: &RawBox<'_>| usize::try_from(b.header.header_size).ok();
    for top in BoxIter::new(bytes) {
        let top = top.map_err(heif_corrupt)?;
        if top.header.box_type.0 != *b"meta" {
            continue;
        }
        // `meta` is a full box: version and flags come first.
        let children = top.content.get(4..).ok_or_else(heif_unsure)?;
        for child in BoxIter::new(children) {
            let child = child.map_err(heif_corrupt)?;
            if child.header.box_type.0 == *b"idat" {
                return header(&top)
                    .zip(header(&child))
                    .map(|(t, c)| top.offset + t + 4 + child.offset + c)
                    .ok_or_else(heif_unsure);
            }
        }
    }
    Err(heif_unsure())
}

fn heif_corrupt(_: heifer_isobmff::Error) -> AppError {
    unsupported("the image structure is truncated or corrupt")
}

fn heif_unsure() -> AppError {
    unsupported("the image's metadata could not be located to be removed")
}

/// The EXIF to keep from `exif` (raw TIFF bytes): only an orientation that
/// turns or flips the image, written alone; `None` when there is none.
fn kept_exif(exif: Option<Bytes>) -> Option<Bytes> {
    let parsed = exif::Reader::new().read_raw(exif?.to_vec()).ok()?;
    let orientation = parsed
        .get_field(exif::Tag::Orientation, exif::In::PRIMARY)?
        .value
        .get_uint(0)?;
    let orientation = u16::try_from(orientation)
        .ok()
        .filter(|o| (2..=8).contains(o))?;
    let field = exif::Field {
        tag: exif::Tag::Orientation,
        ifd_num: exif::In::PRIMARY,
        value: exif::Value::Short(vec![orientation]),
    };
    let mut writer = exif::experimental::Writer::new();
    writer.push_field(&field);
    let mut out = std::io::Cursor::new(Vec::new());
    writer.write(&mut out, false).ok()?;
    Some(Bytes::from(out.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Judged with the default pixel cap.
    fn judge(bytes: Bytes) -> AppResult<Judged> {
        super::judge(bytes, 100_000_000)
    }

    fn fixture(name: &str) -> Bytes {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        Bytes::from(std::fs::read(path).unwrap())
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn accepted_types_by_their_bytes() {
        for (file, ty, w, h) in [
            ("gps.jpg", "image/jpeg", 3, 2),
            ("gps.png", "image/png", 3, 2),
            ("tiny.gif", "image/gif", 3, 2),
            ("gps.webp", "image/webp", 3, 2),
            ("tiny.heic", "image/heic", 64, 64),
            ("tiny.heif", "image/heif", 64, 64),
        ] {
            let j = judge(fixture(file)).unwrap();
            assert_eq!(j.content_type, ty, "{file}");
            assert_eq!((j.width, j.height), (Some(w), Some(h)), "{file}");
            assert_eq!(
                content_type_of(&j.bytes),
                Some(ty),
                "{file} still reads as {ty}"
            );
        }
    }

    /// A JPEG segment: marker and contents, with its length.
    fn segment(marker: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![0xFF, marker];
        out.extend_from_slice(&u16::try_from(contents.len() + 2).unwrap().to_be_bytes());
        out.extend_from_slice(contents);
        out
    }

    #[test]
    fn jpeg_metadata_is_removed_wherever_it_hides() {
        let original = fixture("gps.jpg");
        let mut hostile = vec![0xFF, 0xD8];
        // A JFIF header with a 1×1 thumbnail, a JFXX thumbnail, APP3 "Meta".
        let mut jfif = b"JFIF\0\x01\x02\x00\x00\x01\x00\x01\x01\x01".to_vec();
        jfif.extend_from_slice(b"TH1");
        hostile.extend(segment(0xE0, &jfif));
        hostile.extend(segment(0xE0, b"JFXX\0\x10GPS-IN-JFXX"));
        hostile.extend(segment(0xE3, b"Meta\0GPS-IN-META"));
        hostile.extend(segment(0xEC, b"Ducky GPS-IN-APP12"));
        // The original after its SOI, then, before its EOI (after its last
        // scan, as between the scans of a progressive JPEG), an EXIF segment
        // and a comment.
        let body = &original[2..original.len() - 2];
        hostile.extend_from_slice(body);
        hostile.extend(segment(0xE1, b"Exif\0\0GPS-BETWEEN-SCANS"));
        hostile.extend(segment(0xFE, b"GPS-IN-COMMENT"));
        hostile.extend(segment(0xE2, b"MPF\0GPS-IN-MPF"));
        hostile.extend_from_slice(&[0xFF, 0xD9]);
        hostile.extend_from_slice(b"GPS-AFTER-EOI");
        let j = judge(Bytes::from(hostile)).unwrap();
        for secret in [
            &b"TH1"[..],
            b"GPS-IN-JFXX",
            b"GPS-IN-META",
            b"GPS-IN-APP12",
            b"GPS-BETWEEN-SCANS",
            b"GPS-IN-COMMENT",
            b"GPS-IN-MPF",
            b"GPS-AFTER-EOI",
            b"JFXX",
        ] {
            assert!(
                !contains(&j.bytes, secret),
                "{}",
                String::from_utf8_lossy(secret)
            );
        }
        assert!(j.bytes.ends_with(&[0xFF, 0xD9]));
        assert_eq!((j.width, j.height), (Some(3), Some(2)));
        // The JFIF header stays, with a 0×0 thumbnail.
        assert!(contains(
            &j.bytes,
            b"JFIF\0\x01\x02\x00\x00\x01\x00\x01\x00\x00"
        ));
        // And it still parses as a JPEG, its scan intact.
        let again = Jpeg::from_bytes(j.bytes.clone()).unwrap();
        assert!(again.segments().iter().any(|s| s.marker() == markers::SOS));
    }

    #[test]
    fn gif_extensions_carry_nothing_extra() {
        let gif = fixture("tiny.gif");
        let flags = gif[10];
        let table = if flags & 0x80 != 0 {
            3usize << ((flags & 7) + 1)
        } else {
            0
        };
        let head = 13 + table;
        let mut hostile = gif[..head].to_vec();
        // Looping, with a sub-block after the loop count.
        hostile.extend_from_slice(b"\x21\xFF\x0BNETSCAPE2.0\x03\x01\x05\x00\x0BGPS-IN-LOOP\x00");
        // Graphic control, with a sub-block after its 4 bytes.
        hostile.extend_from_slice(b"\x21\xF9\x04\x00\x0A\x00\x00\x0AGPS-IN-GCE\x00");
        // A plain-text extension (text, drawn by no browser).
        hostile.extend_from_slice(
            b"\x21\x01\x0C\x00\x00\x00\x00\x01\x00\x01\x00\x01\x01\x00\x00\x0BGPS-IN-TEXT\x00",
        );
        hostile.extend_from_slice(&gif[head..]);
        let j = judge(Bytes::from(hostile)).unwrap();
        for secret in [&b"GPS-IN-LOOP"[..], b"GPS-IN-GCE", b"GPS-IN-TEXT"] {
            assert!(
                !contains(&j.bytes, secret),
                "{}",
                String::from_utf8_lossy(secret)
            );
        }
        // The loop count and the delay survive, in their standard form.
        assert!(contains(
            &j.bytes,
            b"\x21\xFF\x0BNETSCAPE2.0\x03\x01\x05\x00\x00"
        ));
        assert!(contains(&j.bytes, b"\x21\xF9\x04\x00\x0A\x00\x00\x00"));
    }

    #[test]
    fn animated_webp_frames_keep_only_what_draws_them() {
        let still = WebP::from_bytes(fixture("gps.webp")).unwrap();
        let image = still
            .chunks()
            .iter()
            .find(|c| [*b"VP8 ", *b"VP8L"].contains(&c.id()))
            .unwrap()
            .clone();
        let mut frame = vec![0u8; 16];
        // 3×2 at (0, 0), 100 ms.
        frame[6] = 2;
        frame[9] = 1;
        frame[12] = 100;
        let mut bytes = Vec::new();
        for c in [
            image.clone(),
            RiffChunk::new(
                *b"XMP ",
                RiffContent::Data(Bytes::from_static(b"GPS-IN-FRAME")),
            ),
        ] {
            let encoded = c.encoder().bytes();
            bytes.extend_from_slice(&encoded);
        }
        frame.extend_from_slice(&bytes);
        let mut vp8x = vec![0x02 | 0x04, 0, 0, 0];
        vp8x.extend_from_slice(&[2, 0, 0, 1, 0, 0]);
        let riff = RiffChunk::new(
            *b"RIFF",
            RiffContent::List {
                kind: Some(*b"WEBP"),
                subchunks: vec![
                    RiffChunk::new(*b"VP8X", RiffContent::Data(Bytes::from(vp8x))),
                    RiffChunk::new(*b"ANIM", RiffContent::Data(Bytes::from_static(&[0; 6]))),
                    RiffChunk::new(*b"ANMF", RiffContent::Data(Bytes::from(frame))),
                ],
            },
        );
        let hostile = riff.encoder().bytes();
        assert!(contains(&hostile, b"GPS-IN-FRAME"));
        let j = judge(hostile).unwrap();
        assert!(!contains(&j.bytes, b"GPS-IN-FRAME"));
        let again = WebP::from_bytes(j.bytes.clone()).unwrap();
        let RiffContent::Data(frame) = again.chunk_by_id(*b"ANMF").unwrap().content() else {
            panic!("a frame");
        };
        assert!(
            contains(frame, &image.encoder().bytes()),
            "the frame's image stays"
        );
    }

    #[test]
    fn metadata_is_removed() {
        let jpeg = fixture("gps.jpg");
        assert!(contains(&jpeg, b"Exif\0\0") && contains(&jpeg, b"GPSLatitude"));
        let out = judge(jpeg).unwrap().bytes;
        assert!(
            !contains(&out, b"Exif") && !contains(&out, b"GPS") && !contains(&out, b"EphemeraCam")
        );

        let png = fixture("gps.png");
        assert!(contains(&png, b"eXIf") && contains(&png, b"tEXt"));
        let out = judge(png).unwrap().bytes;
        assert!(
            !contains(&out, b"eXIf") && !contains(&out, b"tEXt") && !contains(&out, b"EphemeraCam")
        );

        let webp = fixture("gps.webp");
        assert!(contains(&webp, b"EXIF") && contains(&webp, b"XMP "));
        let out = judge(webp).unwrap().bytes;
        assert!(
            !contains(&out, b"EXIF") && !contains(&out, b"XMP ") && !contains(&out, b"EphemeraCam")
        );
        // The RIFF size matches the bytes left.
        let riff = u32::from_le_bytes([out[4], out[5], out[6], out[7]]) as usize;
        assert_eq!(riff + 8, out.len());
    }

    #[test]
    fn orientation_alone_survives() {
        for file in ["rotated.jpg", "rotated.webp"] {
            let original = fixture(file);
            assert!(contains(&original, b"EphemeraCam"), "{file}");
            let out = judge(original).unwrap().bytes;
            assert!(
                !contains(&out, b"EphemeraCam") && !contains(&out, b"GPS"),
                "{file}"
            );
            let exif = match file {
                "rotated.jpg" => Jpeg::from_bytes(out.clone()).unwrap().exif(),
                _ => WebP::from_bytes(out.clone()).unwrap().exif(),
            }
            .expect("an EXIF block with the orientation");
            let parsed = exif::Reader::new().read_raw(exif.to_vec()).unwrap();
            assert_eq!(parsed.fields().count(), 1, "{file}");
            let o = parsed
                .get_field(exif::Tag::Orientation, exif::In::PRIMARY)
                .unwrap();
            assert_eq!(o.value.get_uint(0), Some(6), "{file}");
            assert!(
                parsed
                    .get_field(exif::Tag::GPSLatitude, exif::In::PRIMARY)
                    .is_none()
            );
        }
        // Upright images keep no EXIF at all.
        let out = judge(fixture("gps.jpg")).unwrap().bytes;
        assert!(Jpeg::from_bytes(out).unwrap().exif().is_none());
    }

    #[test]
    fn heif_metadata_items_are_blanked() {
        let heic = fixture("gps.heic");
        let gps = |bytes: &[u8]| {
            exif::Reader::new()
                .read_from_container(&mut std::io::Cursor::new(bytes))
                .ok()
                .and_then(|e| {
                    e.get_field(exif::Tag::GPSLatitude, exif::In::PRIMARY)
                        .map(|_| ())
                })
        };
        assert!(gps(&heic).is_some(), "the sample carries GPS");
        assert!(contains(&heic, b"EphemeraCam") && contains(&heic, b"xmpmeta"));
        let j = judge(heic.clone()).unwrap();
        assert_eq!(j.content_type, "image/heic");
        assert_eq!(j.bytes.len(), heic.len(), "nothing moved");
        assert!(gps(&j.bytes).is_none());
        assert!(!contains(&j.bytes, b"EphemeraCam") && !contains(&j.bytes, b"xmpmeta"));
        // The image itself, its tables and properties are untouched.
        let meta_end = 28 + 519;
        assert_eq!(j.bytes[..meta_end], heic[..meta_end]);
        assert_eq!(content_type_of(&j.bytes), Some("image/heic"));
        // Cut after its tables, its EXIF item lies past the end: refused,
        // not stored with what could not be blanked.
        let cut = judge(heic.slice(..meta_end)).unwrap_err();
        assert_eq!(cut.code(), crate::error::Code::UnsupportedMediaType);
        assert!(cut.message().contains("metadata"), "{}", cut.message());
        // Without metadata items a HEIC is stored as it came.
        let tiny = fixture("tiny.heic");
        assert_eq!(judge(tiny.clone()).unwrap().bytes, tiny);
    }

    #[test]
    fn everything_else_is_refused() {
        let png = fixture("gps.png");
        let script = Bytes::from_static(b"#!/bin/sh\necho pwned\n");
        let cases = [
            Bytes::new(),
            script,
            png.slice(..8),  // the signature alone
            png.slice(..20), // a header cut short
            Bytes::from_static(b"\0\0\0\x1cftypavif\0\0\0\0avifmif1miaf"), // AVIF
        ];
        for bytes in cases {
            let err = judge(bytes.clone()).unwrap_err();
            assert_eq!(
                err.code(),
                crate::error::Code::UnsupportedMediaType,
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn nothing_rides_behind_or_beside_the_image() {
        let jpeg = fixture("gps.jpg");
        let clean = judge(jpeg.clone()).unwrap().bytes;
        // A second image (with its own EXIF/GPS) after EOI, as phones store
        // MPF images, with the APP2 index that points at it; then junk.
        let mut mpf = jpeg[..2].to_vec();
        mpf.extend_from_slice(&[0xFF, 0xE2, 0x00, 0x0A]);
        mpf.extend_from_slice(b"MPF\0MMMM");
        mpf.extend_from_slice(&jpeg[2..]);
        mpf.extend_from_slice(&jpeg);
        mpf.extend_from_slice(&vec![0xA5; 100_000]);
        let out = judge(Bytes::from(mpf)).unwrap().bytes;
        assert_eq!(out, clean);
        assert!(!contains(&out, b"GPS") && !contains(&out, b"MPF"));
        assert_eq!(&out[out.len() - 2..], &[0xFF, 0xD9]);
        // Cut before its end: refused.
        assert!(judge(jpeg.slice(..jpeg.len() - 2)).is_err());

        // GIF: a comment and an XMP application extension before the
        // trailer, junk after it; the looping extension stays.
        let gif = fixture("tiny.gif");
        assert_eq!(*gif.last().unwrap(), 0x3B);
        let body = &gif[..gif.len() - 1];
        let mut dirty = body.to_vec();
        dirty.extend_from_slice(b"\x21\xFE\x0bGPS 48.8584\x00");
        dirty.extend_from_slice(b"\x21\xFF\x0bXMP DataXMP\x05GPS!!\x00");
        dirty.extend_from_slice(b"\x21\xFF\x0bNETSCAPE2.0\x03\x01\x00\x00\x00");
        dirty.push(0x3B);
        dirty.extend_from_slice(&[0x42; 5_000]);
        let out = judge(Bytes::from(dirty)).unwrap().bytes;
        assert!(!contains(&out, b"GPS") && !contains(&out, b"XMP"));
        assert!(contains(&out, b"NETSCAPE2.0"));
        assert_eq!(out.len(), body.len() + 19 + 1);
        assert!(judge(gif.slice(..gif.len() / 2)).is_err());

        // PNG: a private chunk and junk after IEND go.
        let png = fixture("gps.png");
        let mut private = png[..33].to_vec(); // signature + IHDR
        private.extend_from_slice(&[0, 0, 0, 4]);
        private.extend_from_slice(b"prVtGPS!");
        private.extend_from_slice(&crc32(b"prVtGPS!").to_be_bytes());
        private.extend_from_slice(&png[33..]);
        private.extend_from_slice(&[0x42; 5_000]);
        let out = judge(Bytes::from(private)).unwrap().bytes;
        assert!(!contains(&out, b"prVt") && !contains(&out, b"GPS"));
        assert!(out.ends_with(b"IEND\xaeB`\x82"));

        // HEIC: bytes after the last box go.
        let heic = fixture("tiny.heic");
        let mut trailing = heic.to_vec();
        trailing.extend_from_slice(&[0, 0, 0, 0]);
        let out = judge(Bytes::from(trailing)).unwrap().bytes;
        assert_eq!(out.len(), heic.len());
    }

    /// PNG's CRC-32 (bitwise; tests only).
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn pixel_counts_are_capped() {
        let mut png = fixture("gps.png").to_vec();
        // IHDR width and height: 2,000,000,000 each.
        png[16..20].copy_from_slice(&2_000_000_000u32.to_be_bytes());
        png[20..24].copy_from_slice(&2_000_000_000u32.to_be_bytes());
        let e = judge(Bytes::from(png)).unwrap_err();
        assert_eq!(e.code(), crate::error::Code::UnsupportedMediaType);
        assert!(e.message().contains("pixels"), "{e:?}");
        assert!(super::judge(fixture("gps.png"), 6).is_ok());
        assert!(super::judge(fixture("gps.png"), 5).is_err());
    }
}
