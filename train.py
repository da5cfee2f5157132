"""Fine-tune a Sapiens2 model: ``python train.py --config pose_demo.yaml [--trainer.max_steps 10 ...]``."""

from sapiens2_ft.training.cli import main

if __name__ == "__main__":
    main()
