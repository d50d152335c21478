//! `schema.graphql` is what the code exports.

#[test]
fn schema_file_matches_the_code() {
    let exported = ephemera::graphql::schema_sdl();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql");
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    if on_disk != exported {
        if std::env::var("UPDATE_SCHEMA").is_ok() {
            std::fs::write(path, &exported).unwrap();
        } else {
            panic!(
                "schema.graphql is out of date: run `cargo run -- schema > schema.graphql` (or UPDATE_SCHEMA=1 cargo test)"
            );
        }
    }
}
