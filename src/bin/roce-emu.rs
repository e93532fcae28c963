fn main() {
    std::process::exit(roce_emu::cli::main());
}
