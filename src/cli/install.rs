//! `roce-emu gen-docs` (hidden): the man pages (clap_mangen) and shell completions
//! (clap_complete) that tools/install.sh installs, generated from the same definitions as
//! `--help`, so they can never describe other options than the binary has.

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct GenDocsArgs {
    /// Write roce-emu.1 and one page per subcommand (roce-emu-demo.1, ...) here.
    #[arg(long, value_name = "DIR")]
    pub man: Option<PathBuf>,
    /// Write the bash, zsh and fish completions here (roce-emu.bash, _roce-emu,
    /// roce-emu.fish).
    #[arg(long, value_name = "DIR")]
    pub completions: Option<PathBuf>,
}

pub fn run(args: &GenDocsArgs) -> i32 {
    match generate(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("roce-emu gen-docs: {e}");
            2
        }
    }
}

fn generate(args: &GenDocsArgs) -> Result<(), String> {
    if args.man.is_none() && args.completions.is_none() {
        return Err("nothing to do: give --man DIR, --completions DIR or both".into());
    }
    let cmd = super::Cli::command();
    if let Some(dir) = &args.man {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        clap_mangen::generate_to(cmd.clone(), dir)
            .map_err(|e| format!("man pages into {}: {e}", dir.display()))?;
    }
    if let Some(dir) = &args.completions {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut c = cmd.clone();
            clap_complete::generate_to(shell, &mut c, "roce-emu", dir)
                .map_err(|e| format!("{shell} completions into {}: {e}", dir.display()))?;
        }
    }
    Ok(())
}
