//! Placeholder: report.md and charts (being written).
#[derive(clap::Args, Clone, Debug)]
pub struct ReportArgs {}
pub fn main(_a: ReportArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
