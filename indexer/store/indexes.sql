-- Created after the bulk load: building them once is faster than maintaining them per row.
CREATE INDEX IF NOT EXISTS nodes_qualname ON nodes(qualname);
CREATE INDEX IF NOT EXISTS nodes_name ON nodes(name);
CREATE INDEX IF NOT EXISTS nodes_kind ON nodes(kind);
CREATE INDEX IF NOT EXISTS nodes_file ON nodes(file_id);
CREATE INDEX IF NOT EXISTS refs_file ON refs(file_id);
CREATE INDEX IF NOT EXISTS refs_target_key ON refs(target_key);
CREATE INDEX IF NOT EXISTS edges_src ON edges(src_id, kind);
CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst_id, kind);
CREATE INDEX IF NOT EXISTS edges_ref ON edges(ref_id);
CREATE INDEX IF NOT EXISTS edges_file ON edges(file_id);
CREATE INDEX IF NOT EXISTS py_statements_file ON py_statements(file_id, line);
