//! The token check: whether a request carries the dashboard's token, as a bearer token or as
//! `?token=`, compared in constant time.

use super::http::Request;

/// `%XX` and `+` decoded (a query string's value).
fn percent_decode(s: &str) -> Vec<u8> {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi << 4) | lo);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Compares in time independent of where the two differ (the length may show).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the request carries the token (`Authorization: Bearer TOKEN` or `?token=TOKEN`).
pub(super) fn authorized(request: &Request<'_>, query: &str, token: &str) -> bool {
    let bearer = request.authorization.and_then(|v| {
        let v = std::str::from_utf8(v).ok()?.trim();
        let (scheme, credentials) = v.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| credentials.trim())
    });
    if bearer.is_some_and(|b| same_secret(b.as_bytes(), token.as_bytes())) {
        return true;
    }
    query
        .split('&')
        .filter_map(|kv| kv.strip_prefix("token="))
        .any(|v| same_secret(&percent_decode(v), token.as_bytes()))
}
