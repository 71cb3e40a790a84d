//! Links MIT krb5's GSS-API library (Debian: libkrb5-dev, which
//! scripts/install-deps installs). `krb5-config --libs gssapi` names its
//! directory where it is not in the linker's default path.
fn main() {
    println!("cargo:rerun-if-env-changed=SMBQ_GSSAPI_LIB_DIR");
    if let Ok(dir) = std::env::var("SMBQ_GSSAPI_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    } else if let Ok(out) = std::process::Command::new("krb5-config").args(["--libs", "gssapi"]).output() {
        for word in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(dir) = word.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            }
        }
    }
    println!("cargo:rustc-link-lib=dylib=gssapi_krb5");
}
