package gpu

import "testing"

func TestOpenFake(t *testing.T) {
	g, release, err := Open("2xTesla-T4:16GiB", "615.00", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	devs, err := g.Devices()
	if err != nil || len(devs) != 2 || devs[1].MemoryMiB != 16384 {
		t.Errorf("Devices() = %+v, %v; want two 16384 MiB cards", devs, err)
	}
	if d, err := g.Driver(); err != nil || d.Version != "615.00" {
		t.Errorf("Driver() = %+v, %v; want version 615.00", d, err)
	}
	if _, _, err := Open("two cards", "", "node-a"); err == nil {
		t.Error(`Open("two cards") accepted a spec that is not COUNTxMODEL:MEMORY`)
	}
}
