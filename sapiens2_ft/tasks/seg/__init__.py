"""Body-part segmentation: the task module, class-weighted cross-entropy + Dice, mIoU / mAcc / aAcc."""
