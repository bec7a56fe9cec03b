"""Source readers: each turns a database change log into ordered ChangeEvents."""
