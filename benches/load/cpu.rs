//! CPU time, read from `/proc`: the server's own, the harness's own (when it
//! replays SQL itself) and the database server's (every `postgres` process),
//! so a run can say what one request cost in CPU, not only how many fitted in
//! a second on cores the load generator shares.

use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// User + system CPU time `pid` has used so far (zero once it is gone).
pub fn of_pid(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may hold spaces): state is the
    // first, utime the 12th, stime the 13th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_secs_f64((ticks(11) + ticks(12)) as f64 / TICKS_PER_SECOND)
}

/// CPU time of every process named `postgres` (the database server and its
/// backends; a backend that exits between two readings takes its time along,
/// so readings are taken while the connections are open).
pub fn postgres() -> Duration {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim_end() == "postgres")
        })
        .map(of_pid)
        .sum()
}

/// CPU time used by the given processes, and PostgreSQL's when `with_db`,
/// between two readings.
pub struct Meter {
    pids: Vec<u32>,
    with_db: bool,
    /// (the processes', PostgreSQL's) at the start.
    start: (Duration, Duration),
}

impl Meter {
    pub fn start(pids: Vec<u32>, with_db: bool) -> Self {
        let mut m = Self {
            pids,
            with_db,
            start: (Duration::ZERO, Duration::ZERO),
        };
        m.start = m.now();
        m
    }

    fn now(&self) -> (Duration, Duration) {
        let own = self.pids.iter().map(|&p| of_pid(p)).sum();
        let db = if self.with_db {
            postgres()
        } else {
            Duration::ZERO
        };
        (own, db)
    }

    /// Microseconds of CPU per item for `items` done since the start: in all
    /// (the processes and the database), and the processes' own part.
    pub fn micros_per(&self, items: u64) -> (f64, f64) {
        let (own, db) = self.now();
        let own = own.saturating_sub(self.start.0);
        let db = db.saturating_sub(self.start.1);
        let per = |d: Duration| d.as_secs_f64() / items.max(1) as f64 * 1e6;
        (per(own + db), per(own))
    }
}
