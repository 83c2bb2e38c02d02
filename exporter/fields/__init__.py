"""What the exporter can report (pure): the field table, DCGM's catalogue of names, the counters files that pick
fields from them, the entities values belong to, and dcgm-exporter's XID texts and windowed counts."""
