"""Albedo: the task module, upstream's L1 + gradient + chromaticity loss, MAE / RMSE / PSNR / SSIM."""
