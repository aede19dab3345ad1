//! kubectl-style tables: upper-case headers, columns separated by three spaces, no borders.

use comfy_table::{ContentArrangement, Table, presets};

/// Render `rows` under `header` as plain aligned columns.
pub fn plain(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().map(|h| h.to_uppercase()));
    for row in rows {
        table.add_row(row.clone());
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, 3));
    }
    let mut out = String::new();
    for line in table.to_string().lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align_without_borders() {
        let text = super::plain(
            &["name", "state"],
            &[
                vec!["web".into(), "Applied".into()],
                vec!["api-server".into(), "-".into()],
            ],
        );
        assert_eq!(
            text,
            "NAME         STATE\nweb          Applied\napi-server   -\n"
        );
    }
}
