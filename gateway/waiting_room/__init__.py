"""A sale's waiting room (docs/waiting-room.md): signed queue tickets, places fixed at the start, an
admission frontier pushed to every gateway, and admissions the purchase route requires."""
