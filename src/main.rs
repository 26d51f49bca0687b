//! The `sluice` binary: parses the command line and hands over to the process
//! layer, which returns the exit code.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::path::PathBuf::from("/"));
    let cli = match sluice::cli::parse(&args, &cwd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            std::process::exit(1);
        }
    };
    std::process::exit(sluice::process::run(cli));
}
