//! The HTTP/1.1 client both providers' clients share: hyper's pooled client (the one reqwest is
//! built on, without reqwest's URL, TLS and proxy machinery, so the examples build in minutes),
//! with one timeout over the whole exchange.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderMap};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::ProviderError;

/// A pooled HTTP client giving up on an exchange (connect, request, whole response) after
/// `timeout`.
#[derive(Debug, Clone)]
pub(crate) struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

/// A response read to its end.
pub(crate) struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Http {
    pub fn new(timeout: Duration) -> Self {
        Http {
            client: Client::builder(TokioExecutor::new()).build_http(),
            timeout,
        }
    }

    /// Sends `method url` with `headers` and, when given, a JSON `body`; a connection that could
    /// not be made is [`ProviderError::Connect`], no whole answer within the timeout
    /// [`ProviderError::Timeout`], anything else that breaks [`ProviderError::Broken`].
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        json: Option<Vec<u8>>,
    ) -> Result<Reply, ProviderError> {
        let mut request = Request::builder().method(method).uri(url);
        if json.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(json.unwrap_or_default())))
            .map_err(|_| ProviderError::Broken)?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    ProviderError::Connect
                } else {
                    ProviderError::Broken
                }
            })?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|_| ProviderError::Broken)?
                .to_bytes();
            Ok(Reply {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(ProviderError::Timeout))
    }
}

/// `value` percent-encoded for a query string (everything but RFC 3986's unreserved characters).
pub(crate) fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::query_value;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_value("abc-1.2_3~"), "abc-1.2_3~");
        assert_eq!(query_value("a b/é&"), "a%20b%2F%C3%A9%26");
    }
}
