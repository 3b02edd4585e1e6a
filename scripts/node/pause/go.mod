module fightwatch.test/node/pause

go 1.24
