package hashtag_test

import (
	"fmt"

	"github.com/batchlock/batchlock/hashtag"
)

func ExampleSlot() {
	fmt.Println(hashtag.Slot("foo"))
	// Keys with the same {tag} share a slot, so Redis accepts them in one multi-key command.
	fmt.Println(hashtag.Slot("{user1000}.following"), hashtag.Slot("{user1000}.followers"))
	// An empty tag does not count, and only the first '{' is considered: the whole key is hashed.
	fmt.Println(hashtag.Slot("foo{}{bar}"))
	// Output:
	// 12182
	// 3443 3443
	// 8363
}

func ExampleGroupBySlot() {
	for _, g := range hashtag.GroupBySlot([]string{"foo", "{user1000}.b", "bar", "{user1000}.a", "foo"}) {
		fmt.Println(g.Slot, g.Keys)
	}
	// Output:
	// 3443 [{user1000}.a {user1000}.b]
	// 5061 [bar]
	// 12182 [foo]
}

func ExampleForSlot() {
	tag := hashtag.ForSlot(12182)
	fmt.Println(tag, hashtag.Slot("counter:{"+tag+"}"))
	// Output:
	// 9Le 12182
}
