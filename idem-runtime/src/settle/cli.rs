//! One pass as a subcommand of the host's program (`Settler::run_cli`) and its arguments.

use super::{Pass, Settler};

impl Settler {
    /// `idemkit settle` inside the host's own program, where its verify functions are: parses
    /// `args` (`[--dry-run] [--tool NAME] [--tenant NAME]`, without the program's name), runs
    /// one pass with a progress line on stderr (on a terminal) and the summary on stdout, and
    /// returns the exit status ([`SettleReport::exit_code`](super::SettleReport::exit_code); 2 for a usage error).
    ///
    /// ```no_run
    /// # async fn example(settler: idem_runtime::Settler) {
    /// // in the program's `main`, for `myapp settle …`:
    /// let args: Vec<String> = std::env::args().skip(2).collect();
    /// std::process::exit(settler.run_cli(args).await.into());
    /// # }
    /// ```
    pub async fn run_cli<I, A>(&self, args: I) -> u8
    where
        I: IntoIterator<Item = A>,
        A: Into<String>,
    {
        let pass = match parse_args(args) {
            Ok(pass) => pass,
            Err(why) => {
                eprintln!("idemkit settle: {why}");
                return 2;
            }
        };
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let report = self
            .run_once_with(&pass, |done, of, (key, _, s)| {
                if tty {
                    eprint!("\rsettling {done}/{of}: {key} {}\x1b[K", s.as_str());
                } else if done == of || done % 100 == 0 {
                    eprintln!("settling: {done}/{of} record(s)");
                }
            })
            .await;
        if tty {
            eprintln!();
        }
        match report {
            Ok(report) => {
                print!("{}", report.summary());
                report.exit_code()
            }
            Err(e) => {
                eprintln!("idemkit settle: the store failed: {e}");
                1
            }
        }
    }
}

/// `[--dry-run] [--tool NAME] [--tenant NAME]`.
pub fn parse_args<I, A>(args: I) -> Result<Pass, String>
where
    I: IntoIterator<Item = A>,
    A: Into<String>,
{
    let mut pass = Pass::new();
    let mut args = args.into_iter().map(Into::into);
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{what} needs a value: `{what} NAME`"))
        };
        match name.as_str() {
            "--dry-run" if inline.is_none() => pass.dry_run = true,
            "--tool" => pass.tool = Some(value("--tool")?),
            "--tenant" => pass.tenant = Some(value("--tenant")?),
            _ => {
                return Err(format!(
                    "`{arg}` is not an option of settle; use [--dry-run] [--tool NAME] [--tenant NAME]"
                ));
            }
        }
    }
    Ok(pass)
}
