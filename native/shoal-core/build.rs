//! Compiles `cpp/shim.cpp`, the batch shim over simdjson's On-Demand API used by
//! `parser::SimdjsonParser`.
//!
//! simdjson itself comes from the `simdjson-sys` crate (crates.io), which vendors simdjson's
//! amalgamated `simdjson.h`/`simdjson.cpp`, compiles the library (runtime dispatch: every
//! kernel of the target is built and simdjson picks one from the CPU at run time, so no
//! `-march` flag is needed) and links it. Its build script
//! declares `links = "simdjson"`, so Cargo hands us its metadata: `DEP_SIMDJSON_ROOT` (the
//! CMake install prefix, whose `include/` holds the same `simdjson.h`) and, from
//! `cxx-build`, `DEP_SIMDJSON_CXXBRIDGE_DIR1` (a link to the crate's sources).

use std::env;
use std::path::PathBuf;

fn simdjson_include_dir() -> PathBuf {
    let candidates = [
        env::var_os("DEP_SIMDJSON_ROOT").map(|root| PathBuf::from(root).join("include")),
        env::var_os("DEP_SIMDJSON_CXXBRIDGE_DIR1").map(|dir| PathBuf::from(dir).join("simdjson-sys/vendor/simdjson")),
    ];
    for dir in candidates.into_iter().flatten() {
        if dir.join("simdjson.h").is_file() {
            return dir;
        }
    }
    panic!(
        "simdjson.h not found: simdjson-sys exported neither DEP_SIMDJSON_ROOT/include nor \
         DEP_SIMDJSON_CXXBRIDGE_DIR1/simdjson-sys/vendor/simdjson (did its version change?)"
    );
}

fn main() {
    println!("cargo:rerun-if-changed=cpp/shim.cpp");
    println!("cargo:rerun-if-changed=build.rs");
    let include = simdjson_include_dir();
    let msvc = env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("msvc");

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .include(&include)
        // Optimised in every profile: the walker is all inlined simdjson code.
        .opt_level(3)
        // Debug info for simdjson's templates would double the compile time.
        .debug(false)
        .define("NDEBUG", None)
        .file("cpp/shim.cpp");
    if msvc {
        build.flag("/std:c++20");
    } else {
        build.std("c++17");
    }
    build.compile("shoal_simdjson_shim");
}
