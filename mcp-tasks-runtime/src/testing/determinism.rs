//! The report of the crate-wide determinism check,
//! [`determinism_check!`](super::determinism_check).

use std::fmt;

/// What [`determinism_check!`](super::determinism_check) found in a crate:
/// the calls, reached from a `#[task_tool]` body, that a replay would not
/// repeat.
#[derive(Debug, Clone)]
pub struct DeterminismReport {
    findings: Vec<Finding>,
    files: usize,
    tools: usize,
}

/// One refused call: where it is, how the tool reaches it, and what to write
/// instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    file: String,
    line: usize,
    column: usize,
    message: String,
    chain: Vec<String>,
}

impl DeterminismReport {
    #[doc(hidden)]
    pub fn __from_check(
        findings: &[(&str, usize, usize, &str, &[&str])],
        files: usize,
        tools: usize,
    ) -> Self {
        let findings = findings
            .iter()
            .map(|(file, line, column, message, chain)| Finding {
                file: (*file).to_owned(),
                line: *line,
                column: *column,
                message: (*message).to_owned(),
                chain: chain.iter().map(|c| (*c).to_owned()).collect(),
            })
            .collect();
        Self {
            findings,
            files,
            tools,
        }
    }

    /// The findings, by file, line and column.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// How many `.rs` files were read.
    pub fn files(&self) -> usize {
        self.files
    }

    /// How many `#[task_tool]` fns were found.
    pub fn tools(&self) -> usize {
        self.tools
    }

    /// Whether nothing was found.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    /// Panics, listing the findings, unless there are none.
    #[track_caller]
    pub fn assert_clean(&self) {
        assert!(self.is_clean(), "{self}");
    }
}

impl Finding {
    /// The file, relative to the crate's `Cargo.toml` (`src/tools.rs`).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line, from 1.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column, from 1.
    pub fn column(&self) -> usize {
        self.column
    }

    /// What was found, why a replay cannot repeat it, and the durable
    /// alternative.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The calls that reach it: the tool first (`tool `deploy`
    /// (src/tools.rs:12)`), then each fn or macro down to the one it is in.
    pub fn chain(&self) -> &[String] {
        &self.chain
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )?;
        if self.chain.len() > 1 {
            write!(f, "\n    reached from {}", self.chain.join(" -> "))?;
        }
        Ok(())
    }
}

impl fmt::Display for DeterminismReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} finding(s) in the {} tool(s) of {} file(s)",
            self.findings.len(),
            self.tools,
            self.files
        )?;
        for finding in &self.findings {
            write!(f, "\n{finding}")?;
        }
        Ok(())
    }
}
