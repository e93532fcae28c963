//! `roce-emu learn [NAME] [--list] [--width N] [--html FILE]`: the lessons of
//! `crate::learn`, each a scripted exchange between two simulated NICs shown as a ladder
//! with its explanation. Deterministic: the same text on every run.

use crate::learn;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The lesson (see --list), or `all` for every one in order.
    pub name: Option<String>,
    /// List the lessons.
    #[arg(long)]
    pub list: bool,
    /// Columns to draw in (default: 80; at least 60 are used).
    #[arg(long, value_name = "N")]
    pub width: Option<usize>,
    /// Write the lesson's ladder as a self-contained HTML page too.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// ASCII only (no box-drawing characters).
    #[arg(long)]
    pub ascii: bool,
}

fn usage() -> String {
    format!(
        "Lessons (roce-emu learn NAME, or `all`):\n{}",
        learn::list()
    )
}

pub fn run(args: &Args) -> i32 {
    let Some(name) = args.name.as_deref().filter(|_| !args.list) else {
        print!("{}", usage());
        return 0;
    };
    let chosen: Vec<&learn::Lesson> = if name == "all" {
        learn::lessons().iter().collect()
    } else {
        match learn::find(name) {
            Some(l) => vec![l],
            None => {
                eprintln!("roce-emu learn: no lesson {name:?}\n{}", usage());
                return 2;
            }
        }
    };
    if args.html.is_some() && chosen.len() != 1 {
        eprintln!("roce-emu learn: --html takes one lesson, not `all`");
        return 2;
    }
    let stdout = std::io::stdout();
    let color = stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let opts = learn::draw::Opts {
        width: args.width.unwrap_or(80),
        color,
        ascii: args.ascii,
    };
    for (i, l) in chosen.iter().enumerate() {
        let o = match l.run() {
            Ok(o) => o,
            Err(e) => {
                eprintln!(
                    "roce-emu learn {}: the lesson did not go as scripted: {e}",
                    l.name
                );
                return 1;
            }
        };
        if i > 0 {
            println!();
        }
        print!("{}", learn::text(l, &o, &opts));
        if let Some(path) = &args.html {
            let title = format!("roce-emu lesson {}: {}", l.name, l.title);
            let page = match learn::draw::html(&o.trace, &o.addrs, &title) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("roce-emu learn: {e}");
                    return 1;
                }
            };
            if let Err(e) = std::fs::write(path, page) {
                eprintln!("roce-emu learn: cannot write {}: {e}", path.display());
                return 1;
            }
            eprintln!("wrote {}", path.display());
        }
    }
    0
}
