//! Store URLs without their secrets: what `Debug` and messages print.

/// `url` with its password replaced by `***`, for `Debug` and messages: a store's URL is never
/// printed with its secret. Handles `scheme://user:password@host/...` and PostgreSQL's
/// `key=value` form (`password=...`).
///
/// Public for the operator command, which prints the store it opened.
pub fn redacted_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if let Some((credentials, host)) = authority.rsplit_once('@')
            && let Some((user, _password)) = credentials.split_once(':')
        {
            return format!("{scheme}://{user}:***@{host}{path}");
        }
        return url.to_owned();
    }
    url.split_whitespace()
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::redacted_url;

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(
            redacted_url("postgres://agent:s3cr@t-pw@db:5432/agents"),
            "postgres://agent:***@db:5432/agents"
        );
        assert_eq!(
            redacted_url("redis://:s3cret@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redacted_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            redacted_url("host=db user=agent password=s3cret dbname=agents"),
            "host=db user=agent password=*** dbname=agents"
        );
    }
}
