//! Placeholder: compare two results.json (being written).
#[derive(clap::Args, Clone, Debug)]
pub struct CompareArgs {}
pub fn main(_a: CompareArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
