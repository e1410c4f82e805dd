"""MetadataStore on MongoDB (pymongo). Production uses MongoDB; tests use FerretDB."""
