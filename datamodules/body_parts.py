"""The Sapiens2 29-class body-part taxonomy (index = class id, 0 = background)."""

SAPIENS2_PART_CLASSES = (
    "Background",
    "Apparel",
    "Eyeglass",
    "Face_Neck",
    "Hair",
    "Left_Foot",
    "Left_Hand",
    "Left_Lower_Arm",
    "Left_Lower_Leg",
    "Left_Shoe",
    "Left_Sock",
    "Left_Upper_Arm",
    "Left_Upper_Leg",
    "Lower_Clothing",
    "Right_Foot",
    "Right_Hand",
    "Right_Lower_Arm",
    "Right_Lower_Leg",
    "Right_Shoe",
    "Right_Sock",
    "Right_Upper_Arm",
    "Right_Upper_Leg",
    "Torso",
    "Upper_Clothing",
    "Lower_Lip",
    "Upper_Lip",
    "Lower_Teeth",
    "Upper_Teeth",
    "Tongue",
)

# The classes that lie on a person's head: one blob of them per visible head (box-free pose splits people who
# touch between their heads).
HEAD_PARTS = ("Eyeglass", "Face_Neck", "Hair", "Lower_Lip", "Upper_Lip", "Lower_Teeth", "Upper_Teeth", "Tongue")


def resolve_class_names(num_classes: int, class_names: list[str] | None) -> list[str]:
    """The class set of ``data.num_classes`` / ``data.class_names``: the given names, the Sapiens2 names
    for 29 classes, else ``class_0 .. class_{n-1}``."""
    if class_names is not None:
        if len(class_names) != num_classes:
            raise ValueError(f"data.class_names has {len(class_names)} names for data.num_classes={num_classes}")
        return list(class_names)
    if num_classes == len(SAPIENS2_PART_CLASSES):
        return list(SAPIENS2_PART_CLASSES)
    return [f"class_{i}" for i in range(num_classes)]
