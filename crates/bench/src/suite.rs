//! Placeholder: the suite (being written).
#[derive(clap::Args, Clone, Debug)]
pub struct SuiteArgs {}
pub fn main(_a: SuiteArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
