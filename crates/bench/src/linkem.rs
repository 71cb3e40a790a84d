//! Placeholder: the link emulator (being written).
#[derive(clap::Args, Clone, Debug)]
pub struct LinkemArgs {}
pub fn main(_a: LinkemArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
