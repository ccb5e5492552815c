-- schema.sql: the order processor's tables.

-- One row per SKU. fence is the largest fencing token that wrote the row:
-- a write with a smaller one is refused. writes counts the orders that
-- wrote it, so that each write knows its place among the row's writes.
CREATE TABLE stock (
	sku     text PRIMARY KEY,
	initial bigint NOT NULL,
	units   bigint NOT NULL,
	fence   bigint NOT NULL DEFAULT 0,
	writes  bigint NOT NULL DEFAULT 0
);

CREATE TABLE orders (
	id    text PRIMARY KEY,
	lines integer NOT NULL
);

-- One row per line of an accepted order, written with its stock row.
-- counted: sold under a hold of units (Processor.Counted), whose token is
-- its hold's own, not ordered with the row's other writes.
CREATE TABLE order_lines (
	order_id  text NOT NULL REFERENCES orders (id),
	sku       text NOT NULL REFERENCES stock (sku),
	qty       bigint NOT NULL,
	token     bigint NOT NULL,
	write_seq bigint NOT NULL,
	counted   boolean NOT NULL DEFAULT false,
	PRIMARY KEY (order_id, sku),
	UNIQUE (sku, write_seq)
);
