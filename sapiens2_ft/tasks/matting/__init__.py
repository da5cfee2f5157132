"""Image matting: the task module, the matting loss set, SAD / MSE / gradient / connectivity errors."""
