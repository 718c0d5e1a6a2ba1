//! What each path answers: the page, `/api/progress` and `/metrics`, after the token and the
//! method are checked.

use super::auth::authorized;
use super::http::{Reply, Request};
use super::lock;
use super::server::Server;

/// The page, self-contained.
pub(super) const PAGE: &str = include_str!("../ui.html");

pub(super) fn respond(request: &Request<'_>, server: &Server) -> Reply {
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((request.target, ""));
    if let Some(token) = &server.token {
        if !authorized(request, query, token) {
            let mut reply = Reply::text(
                401,
                "this dashboard needs its token: open /?token=TOKEN or send \
                 Authorization: Bearer TOKEN (the token given to sluice with --ui-token or \
                 SLUICE_UI_TOKEN)\n",
            );
            reply
                .extra
                .push(("WWW-Authenticate", "Bearer realm=\"sluice\""));
            return reply;
        }
    }
    if !matches!(request.method, "GET" | "HEAD") {
        let mut reply = Reply::text(405, "only GET is served here\n");
        reply.extra.push(("Allow", "GET, HEAD"));
        return reply;
    }
    let history = &server.history;
    let (content_type, body) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", PAGE.to_string()),
        "/api/progress" => {
            let since = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("since="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            ("application/json", lock(history).progress_json(since))
        }
        "/metrics" => (
            "text/plain; version=0.0.4; charset=utf-8",
            lock(history).metrics(),
        ),
        _ => {
            return Reply::text(
                404,
                "not found: the dashboard serves /, /api/progress and /metrics\n",
            )
        }
    };
    Reply {
        status: 200,
        content_type,
        body,
        extra: Vec::new(),
    }
}
