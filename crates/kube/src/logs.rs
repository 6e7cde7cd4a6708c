//! Pod logs followed into the attempt's log file, so that the log page, the
//! live stream, the download and the command line read it as they read a
//! local job's, and it outlives the pod.
//!
//! The log is asked for with timestamps; the last one written (and how many
//! lines carried it) is kept beside the log, so that a follower that starts
//! again (the connection broke, the server restarted) goes on from there
//! without writing a line twice.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::io::AsyncBufReadExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::LogParams;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::shape::MAIN;

/// The most of one attempt's log that is kept.
pub const MAX_LOG_BYTES: u64 = 1 << 30;
/// Longer lines are cut into pieces of this size.
const MAX_LINE_BYTES: usize = 64 * 1024;
/// After the container ended, what the stream still holds arrives within
/// this (a followed stream may never end by itself).
const DRAIN_IDLE: Duration = Duration::from_secs(2);
/// Where the stream pauses this long, the position is kept.
const SAVE_IDLE: Duration = Duration::from_millis(200);

/// Where the follower stands: the last timestamp written and how many
/// lines carried it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Position {
    last: Option<Timestamp>,
    same: u64,
    /// The log's length when the position was kept; None where the file
    /// predates this record. What lies past it was written after the last
    /// keep (by a server that then died) and comes again from the stream.
    size: Option<u64>,
}

fn position_path(log: &Path) -> PathBuf {
    log.with_extension("log.position")
}

/// Written once the whole log is in: nothing follows it again.
pub fn done_path(log: &Path) -> PathBuf {
    log.with_extension("log.done")
}

async fn read_position(log: &Path) -> Position {
    let Ok(text) = tokio::fs::read_to_string(position_path(log)).await else {
        // Nothing kept yet: whatever the log holds is asked for again.
        return Position {
            size: Some(0),
            ..Position::default()
        };
    };
    let mut parts = text.split_whitespace();
    Position {
        last: parts.next().and_then(|t| t.parse().ok()),
        same: parts.next().and_then(|n| n.parse().ok()).unwrap_or(0),
        size: parts.next().and_then(|n| n.parse().ok()),
    }
}

async fn write_position(log: &Path, position: &Position) {
    if let Some(last) = position.last {
        let size = position.size.unwrap_or(0);
        let _ = tokio::fs::write(
            position_path(log),
            format!("{last} {} {size}", position.same),
        )
        .await;
    }
}

/// Splits `2026-12-01T10:00:00.123456789Z text` into its time and text.
fn split_timestamp(line: &[u8]) -> Option<(Timestamp, &[u8])> {
    let space = line.iter().position(|b| *b == b' ')?;
    let time = std::str::from_utf8(&line[..space]).ok()?.parse().ok()?;
    Some((time, &line[space + 1..]))
}

/// Follows the main container's log of `pod` into `log` until `finished`
/// says the container ended and the stream is drained, or the pod is gone.
pub async fn follow(
    pods: Api<Pod>,
    pod: String,
    log: PathBuf,
    mut finished: watch::Receiver<bool>,
) {
    let Some(mut writer) = Writer::open(log, pod.clone()).await else {
        return;
    };
    let mut failures = 0u32;
    // Streams in a row that ended having brought nothing new.
    let mut quiet = 0u32;
    loop {
        let params = LogParams {
            container: Some(MAIN.to_owned()),
            follow: true,
            timestamps: true,
            since_time: writer.position.last,
            ..Default::default()
        };
        let ended_before = *finished.borrow();
        let stream = match pods.log_stream(&pod, &params).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(status)) if status.is_not_found() => break,
            Err(error) => {
                if ended_before && failures >= 3 {
                    tracing::warn!(%error, %pod, "the end of a job's log could not be read");
                    break;
                }
                let pause = reconnect_pause(failures);
                failures += 1;
                pause_unless_ended(pause, &mut finished).await;
                continue;
            }
        };
        let size_before = writer.size;
        let outcome = writer.take(std::pin::pin!(stream), &mut finished).await;
        if writer.size > size_before {
            failures = 0;
        }
        match outcome {
            Outcome::Drained | Outcome::Full => break,
            Outcome::Ended if *finished.borrow() => break,
            Outcome::Ended | Outcome::Broken => {
                // A kubelet keeps a followed stream open while the
                // container runs; one that ends again and again (a proxy's
                // idle timeout, a kubelet out of file watchers) is asked
                // again less and less often, so that thousands of running
                // pods do not keep the API busy. The container's end is
                // waited for at once.
                quiet = if writer.size > size_before {
                    0
                } else {
                    quiet + 1
                };
                pause_unless_ended(reconnect_pause(quiet), &mut finished).await;
            }
        }
    }
    writer.save().await;
    let _ = tokio::fs::write(done_path(&writer.log), b"").await;
}

/// Writes what log streams bring into an attempt's log, each line once.
struct Writer {
    log: PathBuf,
    pod: String,
    file: tokio::fs::File,
    position: Position,
    size: u64,
    /// When the position was last kept.
    saved: std::time::Instant,
    /// A stream's breaking off was said in the server's log.
    warned: bool,
}

impl Writer {
    async fn open(log: PathBuf, pod: String) -> Option<Writer> {
        if let Some(dir) = log.parent()
            && let Err(error) = tokio::fs::create_dir_all(dir).await
        {
            tracing::warn!(%error, log = %log.display(), "cannot make the folder of a job's log");
            return None;
        }
        let position = read_position(&log).await;
        let file = match tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .await
        {
            Ok(file) => file,
            Err(error) => {
                tracing::warn!(%error, log = %log.display(), "cannot open a job's log");
                return None;
            }
        };
        let mut size = file.metadata().await.map(|m| m.len()).unwrap_or(0);
        // Lines written after the position was last kept (the server died
        // in between) are cut off: the stream, asked for from the kept
        // position, brings them again, and so each is written once.
        if let Some(kept) = position.size
            && size > kept
        {
            match file.set_len(kept).await {
                Ok(()) => size = kept,
                Err(error) => {
                    tracing::warn!(%error, log = %log.display(), "cannot cut a job's log back to its kept position");
                }
            }
        }
        Some(Writer {
            log,
            pod,
            file,
            position,
            size,
            saved: std::time::Instant::now(),
            warned: false,
        })
    }

    async fn save(&mut self) {
        let _ = self.file.flush().await;
        self.position.size = Some(self.size);
        write_position(&self.log, &self.position).await;
        self.saved = std::time::Instant::now();
    }

    /// Writes what one stream (asked for with timestamps, from the last
    /// one written) brings, until it ends or breaks, or the container
    /// ended and nothing more comes.
    async fn take<R: futures::io::AsyncBufRead + Unpin>(
        &mut self,
        mut stream: R,
        finished: &mut watch::Receiver<bool>,
    ) -> Outcome {
        // Lines already written that carry the resumed-from time.
        let mut skip = self.position.same;
        let mut piece = Vec::new();
        let mut continued = false;
        // Lines written since the position was last kept.
        let mut unsaved = false;
        let outcome = loop {
            let finished_now = *finished.borrow();
            // Reading is cancel-safe: what it took is in `piece`, and the
            // next read goes on from there.
            let read = read_piece(&mut stream, &mut piece);
            let got = if finished_now {
                match tokio::time::timeout(DRAIN_IDLE, read).await {
                    Ok(got) => got,
                    Err(_) => break Outcome::Drained,
                }
            } else {
                tokio::select! {
                    got = read => got,
                    Ok(()) = finished.changed() => continue,
                    // Kept whenever the stream pauses: a restart writes no
                    // line twice that was written before the pause.
                    _ = tokio::time::sleep(SAVE_IDLE), if unsaved => {
                        self.save().await;
                        unsaved = false;
                        continue;
                    }
                }
            };
            match got {
                Ok(0) => break Outcome::Ended,
                Ok(_) => {}
                Err(_) => break Outcome::Broken,
            }
            let piece = std::mem::take(&mut piece);
            let whole = piece.ends_with(b"\n");
            let text: &[u8] = if continued {
                &piece
            } else {
                match split_timestamp(&piece) {
                    Some((time, text)) => {
                        let position = &mut self.position;
                        if Some(time) == position.last {
                            if skip > 0 {
                                skip -= 1;
                                continued = !whole;
                                continue;
                            }
                            position.same += 1;
                        } else if position.last.is_some_and(|last| time < last) {
                            continued = !whole;
                            continue;
                        } else {
                            position.last = Some(time);
                            position.same = 1;
                        }
                        text
                    }
                    None => {
                        // Asked with timestamps, every line of the
                        // container's has one: this is the kubelet's (or a
                        // proxy's) word about the stream, not the job's. It
                        // stays out of the log, and the stream is asked for
                        // again later.
                        if !self.warned {
                            self.warned = true;
                            let said = String::from_utf8_lossy(&piece[..piece.len().min(300)]);
                            tracing::warn!(pod = %self.pod, said = %said.trim_end(), "a pod's log stream broke off");
                        }
                        break Outcome::Broken;
                    }
                }
            };
            continued = !whole;
            unsaved = true;
            if self.size + text.len() as u64 > MAX_LOG_BYTES {
                let note = format!(
                    "\n[trainyard: the log reached {}; the rest is not kept]\n",
                    trainyard_domain::format_bytes(MAX_LOG_BYTES)
                );
                let _ = self.file.write_all(note.as_bytes()).await;
                break Outcome::Full;
            }
            if self.file.write_all(text).await.is_err() {
                break Outcome::Full;
            }
            self.size += text.len() as u64;
            // Kept at least once a second while lines keep coming.
            if self.saved.elapsed() >= Duration::from_secs(1) {
                self.save().await;
                unsaved = false;
            }
        };
        self.save().await;
        outcome
    }
}

/// How long to wait before following again after `quiet` streams in a
/// row ended with nothing new: half a second, doubling up to half a
/// minute.
fn reconnect_pause(quiet: u32) -> Duration {
    RECONNECT_FIRST
        .saturating_mul(1 << quiet.min(6))
        .min(RECONNECT_MOST)
}

/// Waits `pause`, or less if the container ends meanwhile (its log is then
/// read to the end at once).
async fn pause_unless_ended(pause: Duration, finished: &mut watch::Receiver<bool>) {
    if *finished.borrow() {
        tokio::time::sleep(pause.min(RECONNECT_FIRST)).await;
        return;
    }
    tokio::select! {
        _ = tokio::time::sleep(pause) => {}
        Ok(()) = finished.changed() => {}
    }
}

const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MOST: Duration = Duration::from_secs(30);

enum Outcome {
    /// The container ended and nothing more came.
    Drained,
    /// The stream ended (the container ended, or the connection closed).
    Ended,
    Broken,
    /// The log is at its limit, or cannot be written.
    Full,
}

/// Reads up to a newline, or MAX_LINE_BYTES, into `out`; 0 at the end.
async fn read_piece<R: futures::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    out: &mut Vec<u8>,
) -> std::io::Result<usize> {
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(out.len());
        }
        let room = MAX_LINE_BYTES - out.len();
        let (take, done) = match buffer.iter().take(room).position(|b| *b == b'\n') {
            Some(newline) => (newline + 1, true),
            None => (buffer.len().min(room), buffer.len() >= room),
        };
        out.extend_from_slice(&buffer[..take]);
        reader.consume_unpin(take);
        if done {
            return Ok(out.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_lines_are_cut_and_lines_keep_their_newlines() {
        let long = "x".repeat(MAX_LINE_BYTES + 10);
        let text = format!("one\n{long}\ntwo");
        let mut reader = futures::io::Cursor::new(text.into_bytes());
        let mut pieces = Vec::new();
        loop {
            let mut piece = Vec::new();
            if read_piece(&mut reader, &mut piece).await.unwrap() == 0 {
                break;
            }
            pieces.push(piece.len());
        }
        assert_eq!(pieces, vec![4, MAX_LINE_BYTES, 11, 3]);
    }

    async fn take(log: &Path, stream: &str) -> (Outcome, String) {
        let (_tell, mut finished) = watch::channel(false);
        let mut writer = Writer::open(log.to_owned(), "p".to_owned()).await.unwrap();
        let outcome = writer
            .take(
                futures::io::Cursor::new(stream.as_bytes().to_vec()),
                &mut finished,
            )
            .await;
        (outcome, std::fs::read_to_string(log).unwrap())
    }

    #[tokio::test]
    async fn a_stream_asked_again_writes_each_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0").join("output.log");
        let (outcome, text) = take(
            &log,
            "2026-12-01T10:00:00.1Z a\n2026-12-01T10:00:00.2Z b\n2026-12-01T10:00:00.2Z c\n",
        )
        .await;
        assert!(matches!(outcome, Outcome::Ended));
        assert_eq!(text, "a\nb\nc\n");
        // Asked again from the last time written: what carried it is
        // skipped, what is earlier too, the rest is added.
        let (_, text) = take(
            &log,
            "2026-12-01T10:00:00.1Z a\n2026-12-01T10:00:00.2Z b\n2026-12-01T10:00:00.2Z c\n\
             2026-12-01T10:00:00.2Z d\n2026-12-01T10:00:01Z e\n",
        )
        .await;
        assert_eq!(text, "a\nb\nc\nd\ne\n");
    }

    #[tokio::test]
    async fn what_a_dead_server_wrote_after_its_last_keep_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0").join("output.log");
        // Written before any position was kept, then the server died.
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(&log, "a\nb\n").unwrap();
        let (_, text) = take(&log, "2026-12-01T10:00:00.1Z a\n2026-12-01T10:00:00.2Z b\n").await;
        assert_eq!(text, "a\nb\n");
        // Kept at b; c was written after, and the server died again.
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut file, b"c\n").unwrap();
        let (_, text) = take(
            &log,
            "2026-12-01T10:00:00.2Z b\n2026-12-01T10:00:00.3Z c\n2026-12-01T10:00:00.4Z d\n",
        )
        .await;
        assert_eq!(text, "a\nb\nc\nd\n");
    }

    #[tokio::test]
    async fn what_the_kubelet_says_about_a_stream_stays_out_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("output.log");
        let (outcome, text) = take(
            &log,
            "2026-12-01T10:00:00.1Z step 1\nfailed to create fsnotify watcher: too many open files",
        )
        .await;
        assert!(matches!(outcome, Outcome::Broken));
        assert_eq!(text, "step 1\n");
        // A long line cut into pieces is the container's all the same.
        let long = "x".repeat(MAX_LINE_BYTES + 10);
        let (outcome, text) = take(&log, &format!("2026-12-01T10:00:02Z {long}\n")).await;
        assert!(matches!(outcome, Outcome::Ended));
        assert_eq!(text, format!("step 1\n{long}\n"));
    }

    #[test]
    fn streams_that_keep_ending_empty_are_asked_again_less_often() {
        assert_eq!(reconnect_pause(0), Duration::from_millis(500));
        assert_eq!(reconnect_pause(1), Duration::from_secs(1));
        assert_eq!(reconnect_pause(5), Duration::from_secs(16));
        assert_eq!(reconnect_pause(6), RECONNECT_MOST);
        assert_eq!(reconnect_pause(1_000), RECONNECT_MOST);
    }

    #[test]
    fn a_timestamp_is_split_from_its_line() {
        let (time, text) = split_timestamp(b"2026-12-01T10:00:00.5Z step 1 loss=0.5\n").unwrap();
        assert_eq!(time.to_string(), "2026-12-01T10:00:00.5Z");
        assert_eq!(text, b"step 1 loss=0.5\n");
        assert!(split_timestamp(b"no time here").is_none());
    }
}
