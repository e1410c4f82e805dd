"""HTTP layer: parse, authorise, call the service layer, render JSON."""
