//! `vramtop serve`: GPU telemetry and allocator figures for Prometheus.
//!
//! - [`exposition`]: a pure writer of the text exposition format 0.0.4;
//! - [`metrics`]: vramtop's metric families and the rendering of a sample;
//! - [`route`]: which reply a request gets (pure, so it is unit-tested);
//! - [`http`]: the HTTP server that answers with the latest body, within
//!   [`http::Limits`]; `cli::serve` feeds it one body per sample.

pub mod exposition;
pub mod http;
pub mod metrics;

use std::net::SocketAddr;

/// The default `--listen` address: loopback only, on the port that
/// node-exporter-style GPU exporters commonly use.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9400";

/// The reply to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics`: the latest rendered body.
    Metrics,
    /// `GET /`: a tiny page that links to /metrics.
    Index,
    /// Any other path: 404.
    NotFound,
    /// A method other than GET or HEAD: 405.
    MethodNotAllowed,
}

/// Routes a request by method and target (a query string is ignored).
/// HEAD is answered like GET, without the body.
pub fn route(method: &str, target: &str) -> Route {
    if method != "GET" && method != "HEAD" {
        return Route::MethodNotAllowed;
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    match path {
        "/metrics" => Route::Metrics,
        "/" => Route::Index,
        _ => Route::NotFound,
    }
}

/// The page served at `/`.
pub const INDEX_HTML: &str = "<!DOCTYPE html>\n<html><head><title>vramtop</title></head>\n<body><h1>vramtop</h1>\n<p>GPU memory telemetry and PyTorch caching-allocator figures in the Prometheus format: <a href=\"/metrics\">/metrics</a></p>\n</body></html>\n";

/// Why a `--listen` address is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenError {
    #[error(
        "refusing to listen on {0}: it is not a loopback address, so anyone who can reach this \
         machine could read its GPU and process metrics; pass --allow-remote to serve them anyway"
    )]
    RemoteNotAllowed(SocketAddr),
}

/// Accepts a loopback address always, any other only with `allow_remote`.
pub fn check_listen(addr: SocketAddr, allow_remote: bool) -> Result<(), ListenError> {
    if addr.ip().is_loopback() || allow_remote {
        Ok(())
    } else {
        Err(ListenError::RemoteNotAllowed(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_and_index_are_served_to_get_and_head() {
        assert_eq!(route("GET", "/metrics"), Route::Metrics);
        assert_eq!(route("HEAD", "/metrics"), Route::Metrics);
        assert_eq!(route("GET", "/metrics?name[]=x"), Route::Metrics);
        assert_eq!(route("GET", "/"), Route::Index);
    }

    #[test]
    fn other_paths_are_not_found_and_other_methods_not_allowed() {
        assert_eq!(route("GET", "/metricsx"), Route::NotFound);
        assert_eq!(route("GET", "/favicon.ico"), Route::NotFound);
        assert_eq!(route("POST", "/metrics"), Route::MethodNotAllowed);
        assert_eq!(route("DELETE", "/"), Route::MethodNotAllowed);
    }

    #[test]
    fn non_loopback_needs_allow_remote() {
        let lo: SocketAddr = "127.0.0.1:9400".parse().expect("address");
        let lo6: SocketAddr = "[::1]:9400".parse().expect("address");
        let any: SocketAddr = "0.0.0.0:9400".parse().expect("address");
        assert_eq!(check_listen(lo, false), Ok(()));
        assert_eq!(check_listen(lo6, false), Ok(()));
        let err = check_listen(any, false).expect_err("refused");
        assert!(err.to_string().contains("--allow-remote"), "{err}");
        assert_eq!(check_listen(any, true), Ok(()));
    }
}
