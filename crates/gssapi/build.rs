//! Links MIT krb5's GSS-API library by its soname, `libgssapi_krb5.so.2`
//! (Debian's libgssapi-krb5-2, which Samba and OpenSSH already pull in), so
//! the build needs no -dev package; SMBQ_GSSAPI_LIB_DIR adds a directory
//! to search where it is not in the linker's default path.
fn main() {
    println!("cargo:rerun-if-env-changed=SMBQ_GSSAPI_LIB_DIR");
    if let Ok(dir) = std::env::var("SMBQ_GSSAPI_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-lib=dylib:+verbatim=libgssapi_krb5.so.2");
}
