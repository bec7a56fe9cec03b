-- A small shop, MySQL/MariaDB flavour: several column types, a composite primary key and one
-- table with large text (products.description, up to ~64 KiB per row).
-- Loaded by sample_dbs.mysql.server.load_schema (statements end with ";" + newline).

CREATE TABLE customers (
  id INT NOT NULL PRIMARY KEY,
  email VARCHAR(255) NOT NULL,
  full_name VARCHAR(200) NOT NULL,
  is_active TINYINT(1) NOT NULL DEFAULT 1,
  loyalty_points INT UNSIGNED NOT NULL DEFAULT 0,
  birth_date DATE NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE products (
  id INT NOT NULL PRIMARY KEY,
  sku CHAR(12) NOT NULL,
  title VARCHAR(300) NOT NULL,
  price DECIMAL(10,2) NOT NULL,
  weight_kg FLOAT NULL,
  rating DOUBLE NULL,
  status ENUM('draft', 'active', 'retired') NOT NULL DEFAULT 'draft',
  tags SET('new', 'sale', 'eco', 'gift') NOT NULL DEFAULT '',
  attrs JSON NULL,
  description MEDIUMTEXT NULL,
  thumbnail VARBINARY(64) NULL,
  stock BIGINT UNSIGNED NOT NULL DEFAULT 0
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE orders (
  id BIGINT NOT NULL PRIMARY KEY,
  customer_id INT NOT NULL,
  status VARCHAR(16) NOT NULL,
  total DECIMAL(12,2) NOT NULL,
  placed_at DATETIME NOT NULL,
  ship_window TIME NULL,
  note TEXT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE order_items (
  order_id BIGINT NOT NULL,
  line_no SMALLINT NOT NULL,
  product_id INT NOT NULL,
  quantity MEDIUMINT UNSIGNED NOT NULL,
  unit_price DECIMAL(10,2) NOT NULL,
  PRIMARY KEY (order_id, line_no)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
