//! The result matrix: script × target, as a table and as JSON.

use super::run::Outcome;
use super::script::{Role, Script};
use std::collections::BTreeSet;
use std::fmt::Write;

/// One script's results, a column per target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub name: String,
    pub title: String,
    pub role: Role,
    /// The compliance statements (`C9-nn`, or `-`), in the order cited.
    pub cites: Vec<String>,
    /// The IBA section of each, as the script gives it.
    pub sections: Vec<String>,
    pub results: Vec<Cell>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Cell {
    pub target: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The script's note for this target (a known deviation), if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Cell {
    /// What the matrix prints.
    pub fn mark(&self) -> &'static str {
        match (&self.outcome, &self.note) {
            (Outcome::Pass, _) => "pass",
            (Outcome::Fail { .. }, Some(_)) => "deviates",
            (Outcome::Fail { .. }, None) => "FAIL",
            (Outcome::NotApplicable { .. }, _) => "n/a",
            (Outcome::Error { .. }, _) => "ERROR",
        }
    }

    /// Whether the run may still succeed: passed, not applicable, or a noted deviation.
    pub fn acceptable(&self) -> bool {
        matches!(
            (&self.outcome, &self.note),
            (Outcome::Pass, _)
                | (Outcome::NotApplicable { .. }, _)
                | (Outcome::Fail { .. }, Some(_))
        )
    }
}

pub fn row(s: &Script, results: Vec<(String, Outcome)>) -> Row {
    Row {
        name: s.name.clone(),
        title: s.title.clone(),
        role: s.role,
        cites: s.cites.iter().map(|c| c.clause.clone()).collect(),
        sections: s.cites.iter().map(|c| c.section.clone()).collect(),
        results: results
            .into_iter()
            .map(|(target, outcome)| Cell {
                note: s.notes.get(&target).cloned(),
                target,
                outcome,
            })
            .collect(),
    }
}

/// The role's word in the matrix and the progress lines.
fn role_name(r: Role) -> &'static str {
    match r {
        Role::Responder => "responder",
        Role::Requester => "requester",
        Role::CmPassive => "cm_passive",
    }
}

/// The line `roce-emu conform` prints as script `n` (0-based) of `total` finishes: its
/// name, role, and each target's result and time, e.g.
/// `[ 3/42] rc/send_only (responder): roce-emu pass 0.012 s, rxe FAIL 1.030 s`.
pub fn progress_line(n: usize, total: usize, row: &Row, times: &[std::time::Duration]) -> String {
    let w = total.to_string().len();
    let results: Vec<String> = row
        .results
        .iter()
        .zip(times.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(c, t)| match t {
            Some(t) => format!("{} {} {:.3} s", c.target, c.mark(), t.as_secs_f64()),
            None => format!("{} {}", c.target, c.mark()),
        })
        .collect();
    format!(
        "[{:>w$}/{total}] {} ({}): {}",
        n + 1,
        row.name,
        role_name(row.role),
        results.join(", ")
    )
}

/// The table, the details of everything that did not pass, and the totals.
pub fn text(rows: &[Row], targets: &[String]) -> String {
    let mut o = String::new();
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(6).max(6);
    let _ = write!(o, "{:w$}  {:9}", "script", "role");
    for t in targets {
        let _ = write!(o, "  {t:>9}");
    }
    let _ = writeln!(o, "  cites");
    for r in rows {
        let _ = write!(o, "{:w$}  {:9}", r.name, role_name(r.role));
        for c in &r.results {
            let _ = write!(o, "  {:>9}", c.mark());
        }
        let _ = writeln!(o, "  {}", r.cites.join(" "));
    }
    for r in rows {
        for c in &r.results {
            let detail = match &c.outcome {
                Outcome::Pass => {
                    if let Some(n) = &c.note {
                        let _ = writeln!(
                            o,
                            "\n{} on {}: passes, but the script notes a deviation: {n}",
                            r.name, c.target
                        );
                    }
                    continue;
                }
                Outcome::Fail {
                    line,
                    statement,
                    why,
                    got,
                } => {
                    let mut d = format!("line {line}: `{statement}`\n    {why}");
                    for g in got {
                        let _ = write!(d, "\n    got: {g}");
                    }
                    d
                }
                Outcome::NotApplicable { line, why } => {
                    format!("line {line}: not applicable: {why}")
                }
                Outcome::Error { line, why } => format!("line {line}: error: {why}"),
            };
            let _ = writeln!(o, "\n{} on {} ({}): {detail}", r.name, c.target, c.mark());
            if let (Outcome::Fail { .. }, Some(n)) = (&c.outcome, &c.note) {
                let _ = writeln!(o, "    note: {n}");
            }
        }
    }
    let clauses: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| r.cites.iter().map(String::as_str))
        .filter(|c| *c != "-")
        .collect();
    let _ = writeln!(
        o,
        "\nconform: {} scripts, {} compliance statements",
        rows.len(),
        clauses.len()
    );
    for (i, t) in targets.iter().enumerate() {
        let count = |m: &str| rows.iter().filter(|r| r.results[i].mark() == m).count();
        let _ = writeln!(
            o,
            "  {t}: {} pass, {} fail, {} deviate (noted), {} not applicable, {} error",
            count("pass"),
            count("FAIL"),
            count("deviates"),
            count("n/a"),
            count("ERROR")
        );
    }
    o
}
