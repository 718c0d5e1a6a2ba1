//! HTTP/1.1 on the wire: the parts of a request head the dashboard reads, and a response
//! written out (status line, headers, body).

use std::fmt::Write as _;

/// The parts of a request head the dashboard looks at.
pub(super) struct Request<'a> {
    pub(super) method: &'a str,
    pub(super) target: &'a str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    version: u8,
    pub(super) authorization: Option<&'a [u8]>,
    connection: Option<&'a [u8]>,
    /// `Content-Length` other than 0, or `Transfer-Encoding`.
    has_body: bool,
}

impl<'a> Request<'a> {
    pub(super) fn from(req: &httparse::Request<'_, 'a>) -> Request<'a> {
        let header = |name: &str| {
            req.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value)
        };
        let has_body = header("transfer-encoding").is_some()
            || header("content-length")
                .is_some_and(|v| std::str::from_utf8(v).map(str::trim) != Ok("0"));
        Request {
            method: req.method.unwrap_or_default(),
            target: req.path.unwrap_or("/"),
            version: req.version.unwrap_or(1),
            authorization: header("authorization"),
            connection: header("connection"),
            has_body,
        }
    }

    /// Whether the connection stays open after the response: HTTP/1.1 without `Connection:
    /// close` and without a body (a body is not read, so nothing after it could be).
    pub(super) fn keep_alive(&self) -> bool {
        let close = self.connection.is_some_and(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("close"))
        });
        self.version == 1 && !close && !self.has_body
    }
}

/// A response before it is written.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) content_type: &'static str,
    pub(super) body: String,
    pub(super) extra: Vec<(&'static str, &'static str)>,
}

impl Reply {
    pub(super) fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.to_string(),
            extra: Vec::new(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// The response's bytes: status line, headers, and the body unless `head_only`.
pub(super) fn reply_bytes(reply: &Reply, keep_alive: bool, head_only: bool) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         Connection: {}\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len(),
        if keep_alive { "keep-alive" } else { "close" },
    );
    for (name, value) in &reply.extra {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    if !head_only {
        bytes.extend_from_slice(reply.body.as_bytes());
    }
    bytes
}
