namespace tsr {}
