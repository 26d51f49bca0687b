//! Copying bytes both ways between two connections with one fixed buffer per
//! direction (no allocation per chunk): WebSocket tunnels and stream
//! sessions. Ends when both directions are done, or one is (without
//! half-close), or nothing moved for `idle`.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What a copy moved.
#[derive(Debug, Default, Clone, Copy)]
pub struct Copied {
    /// Bytes from `a` to `b`, and from `b` to `a`.
    pub ab: u64,
    pub ba: u64,
    /// When the first byte from `b` came.
    pub first_ba: Option<std::time::Instant>,
}

pub async fn both<A, B>(a: A, b: B, idle: std::time::Duration, half_close: bool) -> Copied
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let mut abuf = vec![0u8; 16 * 1024];
    let mut bbuf = vec![0u8; 16 * 1024];
    let (mut a_open, mut b_open) = (true, true);
    let (mut ab, mut ba) = (0u64, 0u64);
    let mut first_ba = None;
    while a_open || b_open {
        tokio::select! {
            n = ar.read(&mut abuf), if a_open => match n {
                Ok(0) | Err(_) => {
                    a_open = false;
                    let _ = bw.shutdown().await;
                    if !half_close { break; }
                }
                Ok(n) => {
                    if bw.write_all(&abuf[..n]).await.is_err() { break; }
                    ab += n as u64;
                }
            },
            n = br.read(&mut bbuf), if b_open => match n {
                Ok(0) | Err(_) => {
                    b_open = false;
                    let _ = aw.shutdown().await;
                    if !half_close { break; }
                }
                Ok(n) => {
                    first_ba.get_or_insert_with(std::time::Instant::now);
                    if aw.write_all(&bbuf[..n]).await.is_err() { break; }
                    ba += n as u64;
                }
            },
            _ = tokio::time::sleep(idle) => break,
        }
    }
    Copied { ab, ba, first_ba }
}
