// `embed_migrations!` reads the migration folders at compile time; cargo does not notice a new
// folder by itself.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
