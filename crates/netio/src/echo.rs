//! `HttpEcho`: an HTTP/1.1 service for tests and benchmarks.
//!
//! A request with a body is answered `200` with the same body, sent zero-copy from the buffers
//! it landed in (or copied, with `copy_body`); a request without one is answered `200` with the
//! path and a newline. Refused requests get the codec's error response and the connection is
//! closed. Pipelined requests are all answered in the batch they arrive in.
//!
//! Invariant: the service never retains buffers itself; zero-copy parts are retained by the
//! loop until sent, so after a stop every buffer is free.

use crate::batch::{Batch, Service};
use crate::buffers::BufferSource;
use crate::http::{self, body_pieces, Codec, Limits, Parsed};

/// The echo service.
#[derive(Debug)]
pub struct HttpEcho {
    codec: Codec,
    /// Copy bodies into the output instead of sending them from their buffers.
    pub copy_body: bool,
    /// Requests answered with 200.
    pub requests: u64,
    /// Requests refused, by status: 400, 413, 431, 501.
    pub refused: [u64; 4],
    /// Connections closed.
    pub closed: u64,
}

impl Default for HttpEcho {
    fn default() -> HttpEcho {
        HttpEcho::new(Limits::default())
    }
}

impl HttpEcho {
    /// An echo service with these request limits.
    pub fn new(limits: Limits) -> HttpEcho {
        HttpEcho { codec: Codec::new(limits), copy_body: false, requests: 0, refused: [0; 4], closed: 0 }
    }

    /// Requests refused with `status` (400, 413, 431 or 501).
    pub fn refused_with(&self, status: u16) -> u64 {
        match status {
            400 => self.refused[0],
            413 => self.refused[1],
            431 => self.refused[2],
            501 => self.refused[3],
            _ => 0,
        }
    }
}

impl<S: BufferSource> Service<S> for HttpEcho {
    fn handle(&mut self, batch: &mut Batch, _bufs: &mut S) {
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            let total = input.len_bytes();
            let mut at = 0;
            while at < total {
                match self.codec.parse(input.segments, at) {
                    Parsed::Incomplete => break,
                    Parsed::Error(e) => {
                        http::write_error(&mut reply.output, &e);
                        let k = match e.status() {
                            400 => 0,
                            413 => 1,
                            431 => 2,
                            _ => 3,
                        };
                        self.refused[k] += 1;
                        reply.close = true;
                        at = total;
                    }
                    Parsed::Complete(req) => {
                        let out = &mut reply.output;
                        if req.body.len > 0 {
                            http::write_head(out, 200, req.keep_alive, req.body.len, None);
                            for p in body_pieces(input.segments, &req.body) {
                                if self.copy_body {
                                    out.push_bytes(p.bytes);
                                } else {
                                    out.push_buf(p.buf, p.offset, p.bytes.len() as u32);
                                }
                            }
                        } else {
                            http::write_head(out, 200, req.keep_alive, req.path.len() + 1, None);
                            out.push_bytes(req.path.as_bytes());
                            out.push_bytes(b"\n");
                        }
                        self.requests += 1;
                        at += req.len_bytes();
                        if !req.keep_alive {
                            reply.close = true;
                            at = total;
                        }
                    }
                }
                if reply.close {
                    break;
                }
            }
            reply.consumed = at;
        }
    }

    fn closed(&mut self, _conn: crate::batch::ConnId, _bufs: &mut S) {
        self.closed += 1;
    }
}
