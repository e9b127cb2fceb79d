//! A relay in front of the gRPC server, so that clients that name the socket's path as each
//! call's `:authority` are served.
//!
//! Over a Unix socket, gRPC's C core (grpcio for Python, Ruby, C++) and grpc-java send the
//! socket's path as `:authority` (`tmp%2Fsigner.sock`, percent-encoded), which no URI authority
//! may hold: the HTTP/2 server under tonic resets every such stream (`PROTOCOL_ERROR`).
//! kube-apiserver (grpc-go) sends `localhost`. So each accepted connection passes through a relay
//! that decodes the client's header blocks and encodes them again, an `:authority` no URI may hold
//! replaced by `localhost`. Every other frame, and everything the server sends, passes as it came.

use loona_hpack::Decoder;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::UnixStream;
use tonic::codegen::http::uri::Authority;

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame types and flags the relay reads (RFC 9113 §6.2, §6.10).
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame payload the server takes: HTTP/2's initial `SETTINGS_MAX_FRAME_SIZE`,
/// which tonic keeps. A larger frame ends the connection, as it would at the server.
const MAX_FRAME: usize = 16_384;
/// The largest header block relayed, encoded, and the most CONTINUATION frames it may take: far
/// above a call's (a few hundred bytes in one frame), and a bound on what one connection makes
/// the relay hold and work through.
const MAX_BLOCK: usize = 64 * 1024;
const MAX_CONTINUATIONS: usize = 16;
/// The largest header list a block may decode to, counted as HPACK counts a header (its name,
/// its value and 32): indexed headers make a small block decode to a large list.
const MAX_HEADER_LIST: usize = 64 * 1024;
/// The dynamic table the client's encoder may use: HTTP/2's initial `SETTINGS_HEADER_TABLE_SIZE`,
/// which tonic keeps.
const HEADER_TABLE: usize = 4096;
/// What replaces an `:authority` no URI may hold.
const LOCALHOST: &[u8] = b"localhost";
/// Bytes in flight between the relay and the server, each way.
const PIPE: usize = 64 * 1024;

/// The server's end of a relay for `client`: two tasks carry the bytes until either side closes.
pub fn relayed(client: UnixStream) -> DuplexStream {
    let (server_end, relay_end) = tokio::io::duplex(PIPE);
    let (mut from_server, mut to_server) = tokio::io::split(relay_end);
    let (mut from_client, mut to_client) = client.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
        let _ = to_client.shutdown().await;
    });
    tokio::spawn(async move {
        match client_to_server(&mut from_client, &mut to_server).await {
            // The relay's own refusals: a client the server might have taken is a bug worth
            // seeing. A connection that merely ends (a liveness probe, a restart) is not.
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                tracing::warn!(%error, "the relay closed a client's connection to the plugin");
            }
            Err(error) => tracing::debug!(%error, "a client's connection to the plugin ended"),
            Ok(()) => {}
        }
        let _ = to_server.shutdown().await;
    });
    server_end
}

/// A header block being gathered: its HEADERS frame and the CONTINUATIONs after it.
struct Block {
    stream: [u8; 4],
    end_stream: bool,
    /// The HEADERS frame's priority fields, when it had them.
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    continuations: usize,
}

/// Carries what the client sends to the server until the client closes, its header blocks
/// encoded again ([`rewritten`]). A client that breaks the framing a header block must keep
/// (RFC 9113 §6.10: its CONTINUATIONs follow it, on its stream, before any other frame), or
/// this relay's bounds, loses its connection.
async fn client_to_server<R, W>(client: &mut R, server: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut preface = [0; PREFACE.len()];
    match client.read_exact(&mut preface).await {
        Ok(_) => {}
        // Connected and gone: the socket's liveness check, or a client that changed its mind.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
        Err(e) => return Err(e),
    }
    server.write_all(&preface).await?;
    if &preface != PREFACE {
        // Not HTTP/2: the server refuses it as it is.
        tokio::io::copy(client, server).await?;
        return Ok(());
    }
    let mut decoder = Decoder::new();
    decoder.set_max_allowed_table_size(HEADER_TABLE);
    let mut block: Option<Block> = None;
    loop {
        let mut head = [0; 9];
        match client.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags, stream) = (head[3], head[4], [head[5], head[6], head[7], head[8]]);
        if length > MAX_FRAME {
            return Err(invalid("a frame larger than SETTINGS_MAX_FRAME_SIZE"));
        }
        let mut payload = vec![0; length];
        client.read_exact(&mut payload).await?;
        match (kind, &mut block) {
            (CONTINUATION, Some(open)) if open.stream == stream => {
                open.continuations += 1;
                open.fragment.extend_from_slice(&payload);
                if open.continuations > MAX_CONTINUATIONS || open.fragment.len() > MAX_BLOCK {
                    return Err(invalid("a header block longer than the relay takes"));
                }
            }
            (_, Some(_)) => return Err(invalid("a header block interrupted by another frame")),
            (HEADERS, None) => block = Some(headers_frame(&head, &payload)?),
            (_, None) => {
                server.write_all(&head).await?;
                server.write_all(&payload).await?;
                continue;
            }
        }
        if flags & END_HEADERS != 0 {
            if let Some(block) = block.take() {
                let headers = decoded(&mut decoder, &block.fragment)?;
                server
                    .write_all(&frames(&block, &rewritten(&headers)))
                    .await?;
            }
        }
    }
}

/// The headers of a whole header block, at most [`MAX_HEADER_LIST`] of them.
fn decoded(decoder: &mut Decoder<'_>, fragment: &[u8]) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let (mut headers, mut size) = (Vec::new(), 0);
    (decoder.decode_with_cb(fragment, |name, value| {
        size += name.len() + value.len() + 32;
        if size <= MAX_HEADER_LIST {
            headers.push((name.into_owned(), value.into_owned()));
        }
    }))
    .map_err(|e| invalid(&format!("a header block HPACK cannot read: {e}")))?;
    if size > MAX_HEADER_LIST {
        return Err(invalid("a header list larger than the relay takes"));
    }
    Ok(headers)
}

/// The block a HEADERS frame starts: its fragment without padding, its priority fields kept.
fn headers_frame(head: &[u8; 9], payload: &[u8]) -> io::Result<Block> {
    let flags = head[4];
    let mut rest = payload;
    let mut padding = 0;
    if flags & PADDED != 0 {
        let (&pad, after) = rest.split_first().ok_or_else(|| invalid("no pad length"))?;
        (padding, rest) = (usize::from(pad), after);
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        let (fields, after) = rest
            .split_first_chunk::<5>()
            .ok_or_else(|| invalid("no priority fields"))?;
        (priority, rest) = (Some(*fields), after);
    }
    let end = (rest.len().checked_sub(padding)).ok_or_else(|| invalid("more padding than data"))?;
    Ok(Block {
        stream: [head[5], head[6], head[7], head[8]],
        end_stream: flags & END_STREAM != 0,
        priority,
        fragment: rest[..end].to_vec(),
        continuations: 0,
    })
}

/// `headers` encoded again, each as a literal never indexed (RFC 7541 §6.2.3: the server's
/// dynamic table stays empty, so nothing but this relay's own output has to agree with it),
/// with an `:authority` no URI may hold replaced by `localhost`.
fn rewritten(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        let unfit = name == b":authority" && Authority::try_from(value.as_slice()).is_err();
        let value = if unfit { LOCALHOST } else { value };
        block.push(0x10);
        for text in [name.as_slice(), value] {
            integer(&mut block, text.len(), 7);
            block.extend_from_slice(text);
        }
    }
    block
}

/// Appends `value` as an HPACK integer with a prefix of `bits` bits (RFC 7541 §5.1), the
/// prefix's other bits (a string's Huffman flag) zero.
fn integer(out: &mut Vec<u8>, mut value: usize, bits: u8) {
    let max = (1 << bits) - 1;
    if value < max {
        out.push(value as u8);
        return;
    }
    out.push(max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// `encoded` as the frames of `block`'s stream: a HEADERS frame (its priority fields kept, no
/// padding), then CONTINUATIONs, each within the server's frame size.
fn frames(block: &Block, encoded: &[u8]) -> Vec<u8> {
    let priority: &[u8] = block.priority.as_ref().map_or(&[], |p| p.as_slice());
    let (first, mut rest) = encoded.split_at(encoded.len().min(MAX_FRAME - priority.len()));
    let mut flags = if block.end_stream { END_STREAM } else { 0 };
    if block.priority.is_some() {
        flags |= PRIORITY;
    }
    let mut out = Vec::with_capacity(encoded.len() + 32);
    let mut frame = |kind: u8, flags: u8, parts: &[&[u8]]| {
        let length = parts.iter().map(|p| p.len()).sum::<usize>();
        out.extend_from_slice(&(length as u32).to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&block.stream);
        parts.iter().for_each(|p| out.extend_from_slice(p));
    };
    let ends = |rest: &[u8]| if rest.is_empty() { END_HEADERS } else { 0 };
    frame(HEADERS, flags | ends(rest), &[priority, first]);
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(rest.len().min(MAX_FRAME));
        rest = after;
        frame(CONTINUATION, ends(rest), &[chunk]);
    }
    out
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A HEADERS frame of stream 1 holding `block`, with `flags`.
    fn headers(flags: u8, block: &[u8]) -> Vec<u8> {
        let mut frame = (block.len() as u32).to_be_bytes()[1..].to_vec();
        frame.extend_from_slice(&[HEADERS, flags, 0, 0, 0, 1]);
        frame.extend_from_slice(block);
        frame
    }

    /// A CONTINUATION frame of stream 1 holding `fragment`, with `flags`.
    fn continuation(flags: u8, fragment: &[u8]) -> Vec<u8> {
        let mut frame = (fragment.len() as u32).to_be_bytes()[1..].to_vec();
        frame.extend_from_slice(&[CONTINUATION, flags, 0, 0, 0, 1]);
        frame.extend_from_slice(fragment);
        frame
    }

    /// A client that connects and closes (the socket's liveness check) ends nothing in error.
    #[tokio::test]
    async fn a_connection_closed_before_its_preface_is_no_error() {
        let mut server = Vec::new();
        client_to_server(&mut [].as_slice(), &mut server)
            .await
            .unwrap();
        assert!(server.is_empty());
    }

    /// What the relay sends the server for `input`, after the preface; or why it closed.
    async fn relayed(input: &[u8]) -> Result<Vec<u8>, io::Error> {
        let client = [PREFACE.as_slice(), input].concat();
        let mut server = Vec::new();
        client_to_server(&mut client.as_slice(), &mut server).await?;
        assert_eq!(&server[..PREFACE.len()], PREFACE);
        Ok(server.split_off(PREFACE.len()))
    }

    async fn relay(input: &[u8]) -> Vec<u8> {
        relayed(input).await.unwrap()
    }

    /// The headers of the header blocks in `frames`, decoded as the server would.
    fn decoded(mut frames: &[u8]) -> Vec<Vec<(String, String)>> {
        let mut decoder = Decoder::new();
        let (mut blocks, mut fragment) = (Vec::new(), Vec::new());
        while !frames.is_empty() {
            let length = usize::from(frames[1]) << 8 | usize::from(frames[2]);
            let (kind, flags) = (frames[3], frames[4]);
            let payload = &frames[9..9 + length];
            if kind == HEADERS || kind == CONTINUATION {
                let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                fragment.extend_from_slice(&payload[skip..]);
                if flags & END_HEADERS != 0 {
                    let headers = decoder.decode(&fragment).unwrap();
                    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                    blocks.push(headers.iter().map(|(n, v)| (text(n), text(v))).collect());
                    fragment.clear();
                }
            }
            frames = &frames[9 + length..];
        }
        blocks
    }

    fn authority(block: &[(String, String)]) -> &str {
        &block.iter().find(|(n, _)| n == ":authority").unwrap().1
    }

    /// grpcio's calls over a Unix socket: the path as `:authority`, indexed by the client's
    /// encoder on the first call and named by its index on the second. Both reach the server as
    /// `localhost`; a valid authority and the other headers pass unchanged.
    #[tokio::test]
    async fn a_path_as_authority_becomes_localhost_and_the_rest_passes() {
        let mut encoder = loona_hpack::Encoder::new();
        let call = |authority: &'static [u8]| -> Vec<(&'static [u8], &'static [u8])> {
            vec![
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", b"/v1.ExternalJWTSigner/Metadata"),
                (b":authority", authority),
                (b"te", b"trailers"),
            ]
        };
        let path = b"tmp%2Fprobe%2Fsigner.sock";
        let mut input = headers(END_HEADERS | END_STREAM, &encoder.encode(call(path)));
        input.extend(headers(END_HEADERS, &encoder.encode(call(path))));
        input.extend(headers(
            END_HEADERS,
            &encoder.encode(call(b"localhost:50051")),
        ));
        // A DATA frame passes as it came.
        let data = [0, 0, 2, 0, 1, 0, 0, 0, 1, 0xab, 0xcd];
        input.extend_from_slice(&data);
        let output = relay(&input).await;
        assert!(output.ends_with(&data));
        let blocks = decoded(&output);
        assert_eq!(blocks.len(), 3);
        assert_eq!(authority(&blocks[0]), "localhost");
        assert_eq!(authority(&blocks[1]), "localhost");
        assert_eq!(authority(&blocks[2]), "localhost:50051");
        assert_eq!(
            blocks[0][2],
            (":path".into(), "/v1.ExternalJWTSigner/Metadata".into())
        );
        assert_eq!(
            output[4],
            END_HEADERS | END_STREAM,
            "the first call's flags"
        );
    }

    /// Padding goes, priority fields stay; a block split over CONTINUATIONs is read whole; one
    /// larger than a frame is split again.
    #[tokio::test]
    async fn padding_priority_and_continuations() {
        let mut encoder = loona_hpack::Encoder::new();
        let long = vec![b'x'; 20_000];
        let block = encoder.encode(vec![
            (b":authority".as_slice(), b"a/b".as_slice()),
            (b"x-long".as_slice(), long.as_slice()),
        ]);
        let (first, rest) = block.split_at(100);
        let mut payload = vec![3];
        payload.extend_from_slice(&[0x80, 0, 0, 3, 15]);
        payload.extend_from_slice(first);
        payload.extend_from_slice(&[0, 0, 0]);
        let mut input = headers(PADDED | PRIORITY, &payload);
        let (second, third) = rest.split_at(rest.len() / 2);
        input.extend(continuation(0, second));
        input.extend(continuation(END_HEADERS, third));
        let output = relay(&input).await;
        assert_eq!(output[4], PRIORITY, "no padding, priority kept, continued");
        assert_eq!(&output[9..14], &[0x80, 0, 0, 3, 15]);
        let blocks = decoded(&output);
        assert_eq!(authority(&blocks[0]), "localhost");
        assert_eq!(blocks[0][1].1.len(), 20_000);
    }

    /// A header block must arrive whole: its CONTINUATIONs next, on its stream. A frame above
    /// the server's frame size, or a block decoding to a header list above the bound (one table
    /// entry named a hundred times), ends the connection before anything is held for it.
    #[tokio::test]
    async fn broken_framing_and_oversized_blocks_end_the_connection() {
        let mut encoder = loona_hpack::Encoder::new();
        let block = encoder.encode(vec![(b":authority".as_slice(), b"a/b".as_slice())]);
        let data = [0, 0, 1, 0, 0, 0, 0, 0, 1, 7];
        let interrupted = [headers(0, &block[..1]), data.to_vec()].concat();
        let mut other = continuation(END_HEADERS, &block[1..]);
        other[8] = 3;
        let other_stream = [headers(0, &block[..1]), other].concat();
        let oversized = [
            [0x00, 0x40, 0x01, 0, 0, 0, 0, 0, 1].as_slice(),
            &[0; 16_385],
        ]
        .concat();
        let big = vec![b'x'; 4000];
        let mut bomb = loona_hpack::Encoder::new().encode(vec![(b"x-big".as_slice(), &big[..])]);
        // The entry just added is the dynamic table's first, index 62: 0x80 | 62 names it again.
        bomb.extend(std::iter::repeat_n(0x80 | 62, 100));
        let bomb = headers(END_HEADERS, &bomb);
        let many = (0..=MAX_CONTINUATIONS)
            .map(|_| continuation(0, &[]))
            .collect::<Vec<_>>();
        let many = [headers(0, &block[..1]), many.concat()].concat();
        let fragment = vec![0; MAX_FRAME];
        let long = (0..5)
            .map(|_| continuation(0, &fragment))
            .collect::<Vec<_>>();
        let long = [headers(0, &block[..1]), long.concat()].concat();
        for (input, says) in [
            (many, "longer than the relay takes"),
            (long, "longer than the relay takes"),
            (interrupted, "interrupted"),
            (other_stream, "interrupted"),
            (oversized, "SETTINGS_MAX_FRAME_SIZE"),
            (bomb, "header list larger"),
        ] {
            let closed = relayed(&input).await.map(|_| ()).unwrap_err();
            assert_eq!(closed.kind(), io::ErrorKind::InvalidData, "{closed}");
            assert!(closed.to_string().contains(says), "{closed}");
        }
    }

    #[test]
    fn integers_past_their_prefix() {
        for (value, expected) in [
            (10, vec![10]),
            (127, vec![127, 0]),
            (1337, vec![127, 186, 9]),
        ] {
            let mut out = Vec::new();
            integer(&mut out, value, 7);
            assert_eq!(out, expected, "{value}");
        }
    }
}
