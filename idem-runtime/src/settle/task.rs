//! A settler running beside the host's agents (`Settler::spawn`, `SettlerHandle`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Pass, SettleReport, Settler};
use crate::error::StoreError;

impl Settler {
    /// Runs a pass every `period` on a task of its own, beside the host's agents, until
    /// [`SettlerHandle::stop`]. A pass whose store fails is logged and counted; the next pass
    /// tries again. Needs a tokio runtime.
    pub fn spawn(self, period: Duration) -> SettlerHandle {
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let (report_tx, report_rx) = watch::channel(None);
        let task = tokio::spawn(async move {
            let mut passes = 0u64;
            loop {
                let report = self.run_once(&Pass::new()).await;
                if let Err(e) = &report {
                    tracing::warn!(error = %e, "idemkit settle: a pass failed; the next tries again");
                }
                passes += 1;
                report_tx.send_replace(Some((passes, Arc::new(report))));
                // Asleep until the period is over, or stopped.
                if tokio::time::timeout(period, stop_rx.wait_for(|stop| *stop))
                    .await
                    .is_ok()
                {
                    break;
                }
            }
        });
        SettlerHandle {
            stop: stop_tx,
            reports: report_rx,
            task,
        }
    }
}

/// A pass's number (1, 2, …) and its report, as [`SettlerHandle::next_pass`] hands it out.
type Numbered = (u64, Arc<Result<SettleReport, StoreError>>);

/// A settler running beside the host's agents ([`Settler::spawn`]).
#[derive(Debug)]
pub struct SettlerHandle {
    stop: watch::Sender<bool>,
    reports: watch::Receiver<Option<Numbered>>,
    task: tokio::task::JoinHandle<()>,
}

impl SettlerHandle {
    /// Waits for the end of the next pass and returns its report (`passes`: how many have run).
    pub async fn next_pass(&mut self) -> (u64, Arc<Result<SettleReport, StoreError>>) {
        self.reports.mark_unchanged();
        let stopped = || {
            let why = StoreError::new(crate::StoreErrorKind::Other, "the settler stopped");
            (0, Arc::new(Err(why)))
        };
        if self.reports.changed().await.is_err() {
            return stopped();
        }
        self.reports
            .borrow_and_update()
            .clone()
            .unwrap_or_else(stopped)
    }

    /// Stops it: a pass under way ends first (each record's step is whole), then the task ends.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
