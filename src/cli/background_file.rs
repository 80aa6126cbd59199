//! A file written by a thread of its own, for commands that write large
//! outputs (`repo export`): the command fills 1 MiB buffers while the
//! thread hands the previous ones to the system, so making the bytes and
//! copying them into the file overlap on two cores.

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

/// Bytes gathered before a buffer goes to the writing thread.
const BUFFER: usize = 1 << 20;
/// Buffers in flight; a full queue makes the command wait for the disk.
const QUEUE: usize = 4;

/// See the module docs. Call [`BackgroundFile::finish`] to get the file
/// back: a write error of the thread is reported there (or by the next
/// write after it happened).
pub struct BackgroundFile {
    buffer: Vec<u8>,
    sender: Option<SyncSender<Vec<u8>>>,
    writer: Option<JoinHandle<io::Result<File>>>,
}

impl BackgroundFile {
    /// Starts the writing thread for `file`.
    pub fn new(mut file: File) -> io::Result<BackgroundFile> {
        let (sender, receiver) = sync_channel::<Vec<u8>>(QUEUE);
        let writer = std::thread::Builder::new()
            .name("file writer".into())
            .spawn(move || {
                for buffer in receiver {
                    file.write_all(&buffer)?;
                }
                Ok(file)
            })?;
        Ok(BackgroundFile {
            buffer: Vec::with_capacity(BUFFER),
            sender: Some(sender),
            writer: Some(writer),
        })
    }

    /// Writes what is buffered, waits for the thread, and returns the file
    /// (not synced).
    pub fn finish(mut self) -> io::Result<File> {
        self.send()?;
        self.sender = None;
        self.join()
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.buffer, Vec::with_capacity(BUFFER));
        let sent = self.sender.as_ref().map(|s| s.send(full));
        match sent {
            Some(Ok(())) => Ok(()),
            // The thread stopped: it failed; its error says why.
            _ => {
                self.sender = None;
                Err(self
                    .join()
                    .err()
                    .unwrap_or_else(|| io::Error::other("the file's writing thread stopped")))
            }
        }
    }

    fn join(&mut self) -> io::Result<File> {
        match self.writer.take() {
            Some(writer) => writer
                .join()
                .map_err(|_| io::Error::other("the file's writing thread panicked"))?,
            None => Err(io::Error::other("the file was already finished")),
        }
    }
}

impl Write for BackgroundFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.buffer.len() + bytes.len() > BUFFER {
            self.send()?;
        }
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    /// Hands what is buffered to the thread (it may not be in the file
    /// yet: [`BackgroundFile::finish`] waits for that).
    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

impl Drop for BackgroundFile {
    fn drop(&mut self) {
        // Unfinished (an error on the way): let the thread end.
        self.sender = None;
        let _ = self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_lands_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut out = BackgroundFile::new(File::create(&path).unwrap()).unwrap();
        let mut expected = Vec::new();
        for i in 0..50_000u32 {
            let piece = i.to_be_bytes().repeat((i % 97) as usize);
            out.write_all(&piece).unwrap();
            expected.extend_from_slice(&piece);
        }
        out.finish().unwrap().sync_all().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
    }

    #[test]
    fn a_failing_file_is_an_error_not_a_hang() {
        // /dev/full takes nothing: every write fails with "no space".
        let Ok(full) = File::options().write(true).open("/dev/full") else {
            return;
        };
        let mut out = BackgroundFile::new(full).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        let mut failed = false;
        for _ in 0..200 {
            if out.write_all(&chunk).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed || out.finish().is_err());
    }
}
