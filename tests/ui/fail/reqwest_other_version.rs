// Issue 51 #2: a request builder of reqwest 0.12 (here `reqwest012`) beside idemkit's reqwest
// 0.13. The error says which reqwest `send_idempotent` works on, not only "no method named".
use idemkit::http::IdempotentRequest;

async fn charge(http: &reqwest012::Client) {
    let _ = http.post("http://localhost/v1/charges").send_idempotent().await;
}

fn main() {
    let _ = charge;
}
